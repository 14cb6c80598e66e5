#include "dpl/data/image/decode.hpp"

#include <cstring>

#include "dpl/core/error.hpp"

namespace dpl::data {

bool has_png_signature(const std::uint8_t* data, std::size_t size) {
  static const std::uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return data != nullptr && size >= sizeof kSignature && std::memcmp(data, kSignature, sizeof kSignature) == 0;
}

ImageFormat image_format(const std::uint8_t* data, std::size_t size) {
  return has_png_signature(data, size) ? ImageFormat::kPng : ImageFormat::kJpeg;
}

JpegSize read_image_size(const std::uint8_t* data, std::size_t size, const std::string& name) {
  if (image_format(data, size) == ImageFormat::kPng) return read_png_size(data, size, name);
  return read_jpeg_size(data, size, name);
}

Image decode_image(const std::uint8_t* data, std::size_t size, const std::string& name, ScaleFactor scale,
                   int channels) {
  if (image_format(data, size) == ImageFormat::kJpeg) return decode_jpeg(data, size, name, scale, channels);
  DPL_CHECK(scale.num == scale.denom && scale.num > 0, name, ": a PNG is decoded at full size only, got the scale ",
            scale.num, "/", scale.denom);
  return decode_png(data, size, name, channels);
}

}  // namespace dpl::data
