#include "dpl/data/image/labeled_image_dataset.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/stable_hash.hpp"
#include "dpl/core/error.hpp"
#include "dpl/data/image/decode.hpp"

namespace dpl::data {

std::vector<ImageListEntry> read_image_list(const std::string& list_path) {
  std::ifstream in(list_path);
  if (!in) DPL_FAIL("cannot open image list ", list_path, ": ", std::strerror(errno));
  std::vector<ImageListEntry> entries;
  std::string text;
  std::int64_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();  // lists written on Windows
    // A UTF-8 byte order mark (some editors write one) is not part of the first path.
    if (line == 1 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
    std::istringstream fields(text);
    std::vector<std::string> f;
    for (std::string w; fields >> w;) f.push_back(w);
    if (f.empty()) continue;
    DPL_CHECK(f.size() == 2, list_path, ":", line, ": expected `path label`, got `", text, "` (", f.size(),
              f.size() == 1 ? " field)" : " fields)");
    const std::string& label = f[1];
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(label.c_str(), &end, 10);
    DPL_CHECK(end != label.c_str() && *end == '\0', list_path, ":", line, ": label `", label, "` is not an integer");
    DPL_CHECK(v >= 0, list_path, ":", line, ": label ", label, " is negative; expected a class index >= 0");
    DPL_CHECK(errno != ERANGE && v <= std::numeric_limits<std::int32_t>::max(), list_path, ":", line, ": label ",
              label, " does not fit in 32 bits");
    entries.push_back({f[0], static_cast<std::int32_t>(v), line});
  }
  DPL_CHECK(!in.bad(), "reading image list ", list_path, " failed after line ", line, ": ", std::strerror(errno));
  return entries;
}

LabeledImageDataset::LabeledImageDataset(const std::string& list_path, const std::string& root)
    : list_path_(list_path), root_(root), entries_(read_image_list(list_path)) {}

std::string LabeledImageDataset::contents_fingerprint() const {
  ::dpl::detail::StableHash h;
  for (const ImageListEntry& e : entries_) h.add(e.path).add("\t").add(std::to_string(e.label)).add("\n");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.value()));
  return std::to_string(entries_.size()) + " entries, hash " + hex;
}

std::string LabeledImageDataset::file_path(std::int64_t i) const {
  const std::string& p = entries_[static_cast<std::size_t>(i)].path;
  if (root_.empty() || (!p.empty() && p.front() == '/')) return p;
  return root_.back() == '/' ? root_ + p : root_ + "/" + p;
}

std::string LabeledImageDataset::where(std::int64_t i) const {
  return list_path_ + ":" + std::to_string(entries_[static_cast<std::size_t>(i)].line) + ": " + file_path(i);
}

std::vector<std::uint8_t> LabeledImageDataset::read_bytes(std::int64_t i) const {
  DPL_CHECK(i >= 0 && i < size(), "LabeledImageDataset: index ", i, " is outside the ", size(), " images of ",
            list_path_);
  const std::string path = file_path(i);
  // Linux opens a folder as a stream whose length reads as huge, which would size the buffer.
  std::error_code ec;
  DPL_CHECK(!std::filesystem::is_directory(path, ec), where(i), " is a folder; expected an image file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    DPL_FAIL(list_path_, ":", entries_[static_cast<std::size_t>(i)].line, ": cannot open ", path, ": ",
             std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff len = in.tellg();
  in.seekg(0, std::ios::beg);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(std::max<std::streamoff>(len, 0)));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  DPL_CHECK(len >= 0 && in.gcount() == static_cast<std::streamsize>(bytes.size()), where(i), ": read ", in.gcount(),
            " of ", len, " bytes");
  return bytes;
}

Example LabeledImageDataset::get(std::int64_t i) const {
  const std::vector<std::uint8_t> bytes = read_bytes(i);
  return Example{decode_image(bytes.data(), bytes.size(), where(i)), entries_[static_cast<std::size_t>(i)].label};
}

CroppedExample LabeledImageDataset::get_for_crop(std::int64_t i, const CropPlanner& plan) const {
  const std::vector<std::uint8_t> bytes = read_bytes(i);
  const std::string name = where(i);
  const JpegSize full = read_image_size(bytes.data(), bytes.size(), name);
  const CropRequest req = plan(full.height, full.width);
  // A PNG has no reduced decode: it comes at full size, and the region stays as planned.
  const ScaleFactor s = image_format(bytes.data(), bytes.size()) == ImageFormat::kPng
                            ? ScaleFactor{}
                            : choose_jpeg_scale(req.box.width, req.box.height, req.out_width, req.out_height);
  CroppedExample out;
  out.image = decode_image(bytes.data(), bytes.size(), name, s);
  out.label = entries_[static_cast<std::size_t>(i)].label;
  // The region in the decoded image: its edges scaled outwards, so it never shrinks below the
  // output size that the factor was chosen to cover.
  const auto lo = [&](int v) { return static_cast<int>(static_cast<std::int64_t>(v) * s.num / s.denom); };
  const auto hi = [&](int v) { return scaled_extent(v, s); };
  const int x0 = lo(req.box.x), y0 = lo(req.box.y);
  const int x1 = std::min(hi(req.box.x + req.box.width), out.image.width);
  const int y1 = std::min(hi(req.box.y + req.box.height), out.image.height);
  out.box = {x0, y0, std::max(1, x1 - x0), std::max(1, y1 - y0)};
  return out;
}

}  // namespace dpl::data
