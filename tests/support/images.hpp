#pragma once
// Images and JPEG files for the image-pipeline tests: patterns whose pixels are known, written
// with dpl's own encoder.

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "dpl/data.hpp"

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

/// Writes bytes to path.
inline void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

/// Encodes img as a JPEG file at path (quality 95).
inline void write_jpeg(const std::string& path, const data::Image& img) { write_bytes(path, data::encode_jpeg(img, 95)); }

/// Writes text to path.
inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace dpl::test
