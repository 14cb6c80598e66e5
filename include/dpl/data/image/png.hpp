#pragma once
// PNG decoding for the image pipeline, so that a data set's PNG files (ImageNet's train set holds
// one, named .jpg) train like its JPEGs. The codec (libpng) stays behind src/: this header
// includes none of its headers. A build without it still compiles; then png_available() is false
// and decode_png and read_png_size throw dpl::Error naming the package to install.

#include <cstddef>
#include <cstdint>
#include <string>

#include "dpl/data/image/jpeg.hpp"
#include "dpl/data/random_access_dataset.hpp"

namespace dpl::data {

/// True when this build of dpl decodes PNG files (libpng was found when it was built).
bool png_available();

/// True when data[0, size) starts with the 8-byte PNG signature. This, not a file's name, decides
/// how an image is decoded. Needs no codec.
bool has_png_signature(const std::uint8_t* data, std::size_t size);

/// Width and height of the PNG held in data[0, size), read from its header (the same pair of
/// extents read_jpeg_size gives). `name` starts every error message.
/// Throws dpl::Error "<name>: not a readable PNG header: <reason>".
JpegSize read_png_size(const std::uint8_t* data, std::size_t size, const std::string& name);

/// Decodes the PNG in data[0, size) to 8-bit RGB (channels 3) or grey (channels 1), HWC, at full
/// size. Every colour type and bit depth is accepted: grey and grey+alpha, palette (its tRNS
/// ignored), RGB and RGBA, 1 to 16 bits per sample, interlaced or not. Alpha is dropped, not
/// composited (the colour samples are kept as stored); 16-bit samples are scaled to 8 bits with
/// rounding (v * 255 / 65535); grey is replicated into RGB, and RGB becomes grey by the luma
/// weights of JPEG's YCbCr (0.299 R + 0.587 G + 0.114 B), as decode_jpeg gives grey of a colour
/// JPEG. Images wider or taller than 65535 pixels are refused, as JPEG cannot hold them either.
/// Throws dpl::Error "<name>: corrupt or truncated PNG: <libpng's reason>" for data it rejects
/// (a bad CRC of a critical chunk, missing image data, a file that ends early), and names channels
/// when it is not 1 or 3.
Image decode_png(const std::uint8_t* data, std::size_t size, const std::string& name, int channels = 3);

}  // namespace dpl::data
