#pragma once
// One entry for the image files of a data set: the format is read from the bytes (PNG by its
// signature, anything else as JPEG), never from the file's name, since real data sets hold PNG
// files named .jpg.

#include <cstddef>
#include <cstdint>
#include <string>

#include "dpl/data/image/jpeg.hpp"
#include "dpl/data/image/png.hpp"
#include "dpl/data/random_access_dataset.hpp"

namespace dpl::data {

/// The formats decode_image reads.
enum class ImageFormat { kJpeg, kPng };

/// kPng when data[0, size) starts with the PNG signature, else kJpeg (whose decoder names what is
/// wrong with anything that is not a JPEG either).
ImageFormat image_format(const std::uint8_t* data, std::size_t size);

/// The width and height of the image, from its header: read_png_size or read_jpeg_size. Errors as
/// theirs.
JpegSize read_image_size(const std::uint8_t* data, std::size_t size, const std::string& name);

/// Decodes a JPEG (decode_jpeg, scaled by `scale`) or a PNG (decode_png, always at full size:
/// PNG has no reduced decode, so `scale` must be 1/1 for it) to 8-bit RGB (channels 3) or grey
/// (channels 1). Errors as those functions', and "<name>: a PNG is decoded at full size only,
/// got the scale n/d" for a PNG with another scale.
Image decode_image(const std::uint8_t* data, std::size_t size, const std::string& name, ScaleFactor scale = {},
                   int channels = 3);

}  // namespace dpl::data
