#pragma once
// Images and JPEG files for the image-pipeline tests: patterns whose pixels are known, written
// with dpl's own encoder.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dpl/data.hpp"
#include "support/file_bytes.hpp"

namespace dpl::test {

/// A smooth RGB pattern (gradients, so JPEG keeps it within a few levels), shifted by `k` so that
/// different images differ.
inline data::Image gradient_image(int height, int width, int k = 0) {
  data::Image img = data::Image::zeros(height, width, 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      std::uint8_t* p = img.pixels.data() + (static_cast<std::size_t>(y) * width + x) * 3;
      p[0] = static_cast<std::uint8_t>(40 + x * 160 / width + k % 40);
      p[1] = static_cast<std::uint8_t>(40 + y * 160 / height);
      p[2] = static_cast<std::uint8_t>(120 + k % 50);
    }
  return img;
}

/// Small random RGB images of a few sizes (12 x 10..12), label = index: a data set for the loader
/// without files. Examples listed in `bad` fail to load (as "synthetic.txt:<index + 1>: example
/// <index> is broken"), and every get can be slowed down to keep the loader's workers busy.
class SyntheticImages : public data::RandomAccessDataset {
 public:
  explicit SyntheticImages(std::int64_t n, std::vector<std::int64_t> bad = {}, int delay_ms = 0)
      : n_(n), bad_(std::move(bad)), delay_ms_(delay_ms) {}
  std::int64_t size() const override { return n_; }
  int channels() const override { return 3; }
  data::Example get(std::int64_t i) const override {
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    DPL_CHECK(std::find(bad_.begin(), bad_.end(), i) == bad_.end(), "synthetic.txt:", i + 1, ": example ", i,
              " is broken");
    Generator g(static_cast<std::uint64_t>(i));
    data::Example e;
    e.image = data::Image::zeros(12, 10 + static_cast<int>(i % 3), 3);
    for (auto& p : e.image.pixels) p = static_cast<std::uint8_t>(g.below(256));
    e.label = static_cast<std::int32_t>(i);
    return e;
  }

 private:
  std::int64_t n_;
  std::vector<std::int64_t> bad_;
  int delay_ms_;
};

/// Encodes img as a JPEG file at path (quality 95).
inline void write_jpeg(const std::string& path, const data::Image& img) { write_bytes(path, data::encode_jpeg(img, 95)); }

/// Writes text to path.
inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace dpl::test
