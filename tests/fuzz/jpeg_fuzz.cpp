// Image decoding on arbitrary bytes, as LabeledImageDataset reads files: read_image_size and
// decode_image (JPEG in every colour space, CMYK and YCCK included, and PNG, told apart by the
// signature) must return an image of the promised extents or raise dpl::Error. The input's length
// picks the scaling factor (a JPEG's; a PNG decodes at full size) and the channels, so every factor
// is reached from every seed after a few length mutations.
//
// Headers may claim up to 65535 x 65535 pixels, which decode_jpeg rightly allocates (12 GiB for
// RGB) before the decoder finds that the data is missing; such inputs are only header-read here,
// as in libjpeg-turbo's own harnesses, so that the fuzzer spends its time on decoding.
#include <cstdint>
#include <string>
#include <vector>

#include "dpl/data/image/decode.hpp"
#include "fuzz_util.hpp"

using namespace dpl;

namespace {
constexpr std::int64_t kMaxDecodedPixels = std::int64_t{1} << 22;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<data::ScaleFactor> factors = data::jpeg_scale_factors();
  data::JpegSize full;
  if (!fuzz::accepts([&] { full = data::read_image_size(data, size, "input"); })) return 0;
  fuzz::require(full.width > 0 && full.height > 0, "read_image_size: accepted a header of zero extent");

  const bool png = data::image_format(data, size) == data::ImageFormat::kPng;
  const data::ScaleFactor s = png ? data::ScaleFactor{} : factors[size % factors.size()];
  const int channels = (size / factors.size()) % 2 == 0 ? 3 : 1;
  // A crop as the loader asks for one: the chosen factor must leave the box at least the output.
  const int out_w = 1 + static_cast<int>(size % 97), out_h = 1 + static_cast<int>(size % 89);
  const data::ScaleFactor c = data::choose_jpeg_scale(full.width, full.height, out_w, out_h);
  fuzz::require(c.num == c.denom || (data::scaled_extent(full.width, c) >= out_w &&
                                     data::scaled_extent(full.height, c) >= out_h),
                "choose_jpeg_scale: the factor shrinks the box below the output");

  if (static_cast<std::int64_t>(data::scaled_extent(full.width, s)) * data::scaled_extent(full.height, s) >
      kMaxDecodedPixels)
    return 0;
  fuzz::accepts([&] {
    const data::Image img = data::decode_image(data, size, "input", s, channels);
    const bool extents =
        img.height == data::scaled_extent(full.height, s) && img.width == data::scaled_extent(full.width, s);
    fuzz::require(extents && img.channels == channels && img.valid(),
                  "decode_image: the image's extents differ from the header's, scaled");
  });
  return 0;
}
