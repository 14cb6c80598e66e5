#pragma once
// JPEG decoding and encoding for the image pipeline. The codec (libjpeg-turbo's TurboJPEG API)
// stays behind src/: this header includes none of its headers. A build without it still
// compiles; then jpeg_available() is false and every call below throws dpl::Error saying so.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dpl/data/random_access_dataset.hpp"

namespace dpl::data {

/// True when this build of dpl has a JPEG codec (libjpeg-turbo was found when it was built).
bool jpeg_available();

/// A scaling factor num/denom that the decoder applies in the DCT domain while decoding.
struct ScaleFactor {
  int num = 1;
  int denom = 1;
};

/// extent scaled by s as the decoder does it: ceil(extent * num / denom).
inline int scaled_extent(int extent, ScaleFactor s) { return (extent * s.num + s.denom - 1) / s.denom; }

/// The scaling factors the decoder supports that do not enlarge (num/denom <= 1), largest first;
/// {1/1} alone without a codec.
std::vector<ScaleFactor> jpeg_scale_factors();

/// The smallest supported factor s (the strongest downscale) for which a region of
/// box_width x box_height pixels still spans at least out_width x out_height pixels after
/// scaling, so that resizing the scaled region to the output never enlarges it. Returns 1/1 when
/// no factor below 1 qualifies (including when the region is already smaller than the output).
/// Requires positive extents; throws dpl::Error otherwise.
ScaleFactor choose_jpeg_scale(int box_width, int box_height, int out_width, int out_height);

/// Width and height of a JPEG image, read from its header only.
struct JpegSize {
  int width = 0;
  int height = 0;
};

/// Reads the size of the JPEG held in data[0, size). `name` says where the bytes came from and
/// starts every error message (e.g. "train.txt:12: a/b.jpg").
/// Throws dpl::Error "<name>: not a readable JPEG header: <decoder's reason>".
JpegSize read_jpeg_size(const std::uint8_t* data, std::size_t size, const std::string& name);

/// Decodes the JPEG in data[0, size) to 8-bit RGB (channels 3) or grayscale (channels 1), HWC,
/// scaled by `scale` (one of jpeg_scale_factors()) in the DCT domain: the result is
/// scaled_extent(height, scale) x scaled_extent(width, scale). CMYK and YCCK JPEGs are decoded
/// too, read in Adobe's inverted-CMYK convention (the one Photoshop writes): R = C * K / 255, and G
/// from M, B from Y, without a colour profile.
/// Throws dpl::Error "<name>: corrupt or truncated JPEG: <decoder's reason>" for data the decoder
/// rejects, including any warning it raises (a truncated file is an error, not a grey tail), and
/// names the factor when it is not supported or channels is not 1 or 3.
Image decode_jpeg(const std::uint8_t* data, std::size_t size, const std::string& name, ScaleFactor scale = {},
                  int channels = 3);

/// Encodes an 8-bit image with 1 (grayscale) or 3 (RGB) channels as a baseline JPEG at the given
/// quality (1..100), chroma subsampled 4:2:0 for RGB. Requires image.valid(), positive extents;
/// throws dpl::Error naming what is wrong, or the encoder's reason.
std::vector<std::uint8_t> encode_jpeg(const Image& image, int quality = 90);

}  // namespace dpl::data
