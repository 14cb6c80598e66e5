#pragma once
// Readers for the IDX format of MNIST and Fashion-MNIST, plain or gzip-compressed.

#include <string>

#include "dpl/tensor/tensor.hpp"

namespace dpl::data {

/// Reads an IDX image file: magic 0x00000803 (unsigned bytes, 3 dimensions), then the big-endian
/// extents (count, rows, cols), then count*rows*cols pixels. A file that starts with the gzip
/// magic bytes (1f 8b) is decompressed first, whatever its name.
///
/// Requires: path names a readable IDX image file of exactly the length its header promises.
/// Ensures: a host float32 tensor of shape (count, rows*cols), pixel/255, so values lie in [0, 1].
/// Throws dpl::Error naming the file, what was expected and what was found, with the byte offset
/// where it applies (offsets count decompressed bytes for gzip files): unreadable file, corrupt or
/// truncated gzip stream, bad magic number, wrong element type or dimension count, a file shorter
/// or longer than its header promises. A gzip stream is inflated no further than one byte past
/// the header's promise, so a small file that would decompress to gigabytes (a gzip bomb) is
/// refused ("decompresses to more than the N bytes its header promises") within that memory.
Tensor read_idx_images(const std::string& path);

/// Reads an IDX label file: magic 0x00000801 (unsigned bytes, 1 dimension), the big-endian count,
/// then one byte per label. Plain or gzip, detected as for read_idx_images.
///
/// Requires: path names a readable IDX label file of exactly the length its header promises.
/// Ensures: a host int32 tensor of shape (count,) holding the labels (0..255).
/// Throws dpl::Error as read_idx_images does.
Tensor read_idx_labels(const std::string& path);

}  // namespace dpl::data
