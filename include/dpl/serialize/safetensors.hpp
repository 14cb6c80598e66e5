#pragma once
// The safetensors format: named tensors and string metadata in one file, readable by the Python
// ecosystem (the `safetensors` package, or json + numpy by hand).
//
// Layout: an 8-byte little-endian header length N; N bytes of JSON, padded with spaces to a
// multiple of 8, mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} and
// the optional key "__metadata__" to an object of strings; then the data section, the tensors'
// raw little-endian bytes in row-major order, offsets counted from its start.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dpl/tensor/tensor.hpp"

namespace dpl::serialize {

/// The contents of a safetensors file, read into host memory.
struct SafetensorsFile {
  /// The file that was read (as passed to load_safetensors).
  std::string path;
  /// Every tensor under its name, in the order of their data in the file. Each is a contiguous
  /// host tensor with the dtype and shape the header gives.
  std::vector<std::pair<std::string, Tensor>> tensors;
  /// The header's "__metadata__" object (empty when the file has none).
  std::map<std::string, std::string> metadata;

  /// True when the file holds a tensor called name.
  bool contains(const std::string& name) const;
  /// The tensor called name. Throws dpl::Error naming the file and the tensor when it is absent.
  const Tensor& at(const std::string& name) const;
};

/// Writes tensors (in the given order) and metadata to path in the safetensors format, replacing
/// any file there.
///
/// Requires: defined tensors of any dtype and device (device tensors are copied to the host
/// first), names non-empty, unique and other than "__metadata__".
/// Ensures: the data goes to a new file beside path, which is flushed to disk (fsync) and then
/// renamed over path, so path holds either its previous contents or the complete new file, never
/// a partial one. On any failure (bad input, full disk, no permission) the temporary file is
/// removed and dpl::Error is thrown naming path and the cause; an existing file is left as it was.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file written by save_safetensors or by any other writer of the format.
///
/// Requires: path names a readable safetensors file whose dtypes are F32, BF16, F16, I32 or I64.
/// Ensures: every tensor as a host tensor, and the metadata.
/// Throws dpl::Error naming the file and what is wrong, with the byte offset or the tensor name
/// where one applies: a file too short for its 8-byte header length, a header length that reaches
/// past the end of the file, malformed JSON, a header that is not an object of the form above, an
/// unknown dtype, negative extents, data offsets that are reversed, out of range, overlapping,
/// leave a gap, or do not match shape x dtype size, and bytes after the last tensor.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace dpl::serialize
