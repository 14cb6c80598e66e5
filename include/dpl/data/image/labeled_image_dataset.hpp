#pragma once
// Chainer's LabeledImageDataset: a list file of "relative/path.jpg label" lines, and the JPEG or
// PNG files it names, decoded on demand.

#include <cstdint>
#include <string>
#include <vector>

#include "dpl/data/random_access_dataset.hpp"

namespace dpl::data {

/// One line of an image list.
struct ImageListEntry {
  std::string path;         ///< as written in the list (relative to the root, or absolute)
  std::int32_t label = 0;   ///< class label, >= 0
  std::int64_t line = 0;    ///< 1-based line number in the list file, for messages
};

/// Reads an image list: one "path label" pair per line, separated by blanks; blank lines are
/// skipped. Requires a readable file in which every other line has exactly two fields and the
/// second is a non-negative integer that fits in 32 bits.
/// Throws dpl::Error "<list>:<line>: expected `path label`, got `<the line>`" (a wrong number of
/// fields), "<list>:<line>: label `<text>` is not an integer", "<list>:<line>: label <n> is
/// negative; expected a class index >= 0", and "cannot open image list <list>: <system reason>".
std::vector<ImageListEntry> read_image_list(const std::string& list_path);

/// The images of a list file, each decoded (JPEG or PNG, told apart by their bytes, to RGB: see
/// decode_image) when it is read. Safe to read from
/// several threads at once: every call opens and decodes its own file.
class LabeledImageDataset : public RandomAccessDataset {
 public:
  /// Reads the list (see read_image_list) and keeps it; image files are opened only when read.
  /// A relative path in the list is taken relative to root when root is non-empty.
  LabeledImageDataset(const std::string& list_path, const std::string& root = {});

  std::int64_t size() const override { return static_cast<std::int64_t>(entries_.size()); }
  int channels() const override { return 3; }
  /// The image at full resolution. Throws dpl::Error "<list>:<line>: cannot open <path>: <system
  /// reason>" for a file that cannot be read, "<list>:<line>: <path> is a folder; expected an
  /// image file" for a folder, and "<list>:<line>: <path>: corrupt or truncated
  /// JPEG: <decoder's reason>" (or PNG) for one that does not decode.
  Example get(std::int64_t i) const override;
  /// Decodes a JPEG at the strongest DCT-domain downscale that still leaves plan's region at least
  /// as large as its output (choose_jpeg_scale), a PNG at full size, and maps the region to the
  /// decoded image. Errors as get().
  CroppedExample get_for_crop(std::int64_t i, const CropPlanner& plan) const override;

  /// The list's entries, in order.
  const std::vector<ImageListEntry>& entries() const { return entries_; }
  /// The file entry i is read from (root joined with its path).
  std::string file_path(std::int64_t i) const;
  /// The list file this data set was read from.
  const std::string& list_path() const { return list_path_; }
  /// What decides the data, cheap to compare across ranks: "<N> entries, hash <16 hex digits>",
  /// the stable hash of every entry's path and label in order. Equal lists give equal text in
  /// every process; lists that differ in any path or label give different text (but for a
  /// 64-bit collision). Line endings and blank lines do not count.
  std::string contents_fingerprint() const;

 private:
  std::vector<std::uint8_t> read_bytes(std::int64_t i) const;
  std::string where(std::int64_t i) const;

  std::string list_path_;
  std::string root_;
  std::vector<ImageListEntry> entries_;
};

}  // namespace dpl::data
