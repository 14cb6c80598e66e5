// JPEG decoding and encoding, and the choice of DCT-domain scaling for a crop.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "dpl/data.hpp"
#include "support/expect_error.hpp"
#include "support/images.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;
using namespace dpl::data;
using ::testing::HasSubstr;

class Jpeg : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!jpeg_available()) GTEST_SKIP() << "this build has no JPEG codec (libturbojpeg0-dev)";
  }
};

// The largest absolute difference between two images of the same size.
int max_abs_diff(const Image& a, const Image& b) {
  int worst = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) worst = std::max(worst, std::abs(a.pixels[i] - b.pixels[i]));
  return worst;
}

TEST_F(Jpeg, RoundTripKeepsSizeAndPixelsClose) {
  const Image src = test::gradient_image(48, 80);
  const std::vector<std::uint8_t> bytes = encode_jpeg(src, 95);
  ASSERT_GE(bytes.size(), 4u);
  EXPECT_EQ(bytes[0], 0xFF);
  EXPECT_EQ(bytes[1], 0xD8);
  const JpegSize size = read_jpeg_size(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(size.width, 80);
  EXPECT_EQ(size.height, 48);
  const Image back = decode_jpeg(bytes.data(), bytes.size(), "mem");
  ASSERT_EQ(back.height, 48);
  ASSERT_EQ(back.width, 80);
  ASSERT_EQ(back.channels, 3);
  ASSERT_TRUE(back.valid());
  // Smooth gradients at quality 95 survive 4:2:0 subsampling within a few levels.
  EXPECT_LE(max_abs_diff(src, back), 8);

  // Grayscale in and out.
  Image gray = Image::zeros(16, 16, 1);
  for (std::size_t i = 0; i < gray.pixels.size(); ++i) gray.pixels[i] = static_cast<std::uint8_t>(i);
  const std::vector<std::uint8_t> gbytes = encode_jpeg(gray, 100);
  const Image gback = decode_jpeg(gbytes.data(), gbytes.size(), "gray", {}, 1);
  ASSERT_EQ(gback.channels, 1);
  EXPECT_LE(max_abs_diff(gray, gback), 3);
}

TEST_F(Jpeg, ScaleFactorsAreDownscalesLargestFirst) {
  const std::vector<ScaleFactor> f = jpeg_scale_factors();
  ASSERT_GE(f.size(), 4u);  // libjpeg-turbo offers n/8 for n = 1..8 at least
  EXPECT_EQ(f.front().num, f.front().denom);
  for (std::size_t i = 0; i < f.size(); ++i) {
    EXPECT_LE(f[i].num, f[i].denom);
    if (i > 0) {
      EXPECT_LT(f[i].num * f[i - 1].denom, f[i - 1].num * f[i].denom) << "factor " << i;
    }
  }
}

TEST_F(Jpeg, ChoosesStrongestDownscaleThatStillCoversTheOutput) {
  // 1000 px down to 224: every stronger factor than the one chosen leaves fewer than 224 px.
  const ScaleFactor s = choose_jpeg_scale(1000, 1000, 224, 224);
  EXPECT_GE(1000 * s.num, 224 * s.denom);
  for (const ScaleFactor& f : jpeg_scale_factors())
    if (f.num * s.denom < s.num * f.denom) {
      EXPECT_LT(1000 * f.num, 224 * f.denom) << f.num << "/" << f.denom;
    }
  EXPECT_LT(s.num * 2, s.denom);  // a real downscale, at most 1/2

  // The shorter side decides.
  const ScaleFactor wide = choose_jpeg_scale(2000, 300, 224, 224);
  EXPECT_GE(300 * wide.num, 224 * wide.denom);
  // A region already smaller than the output is never scaled.
  const ScaleFactor small = choose_jpeg_scale(100, 100, 224, 224);
  EXPECT_EQ(small.num, small.denom);
  DPL_EXPECT_ERROR(choose_jpeg_scale(0, 10, 5, 5), HasSubstr("expected positive extents"));
}

TEST_F(Jpeg, ScaledDecodeHasScaledSizeAndSameContent) {
  const Image src = test::gradient_image(256, 256);
  const std::vector<std::uint8_t> bytes = encode_jpeg(src, 95);
  const Image half = decode_jpeg(bytes.data(), bytes.size(), "mem", {1, 2});
  EXPECT_EQ(half.height, 128);
  EXPECT_EQ(half.width, 128);
  // Pixel (2y, 2x) of the original is about pixel (y, x) of the half-size decode.
  const Image full = decode_jpeg(bytes.data(), bytes.size(), "mem");
  const Image down = resize_crop(full, {0, 0, 256, 256}, 128, 128);
  EXPECT_LE(max_abs_diff(half, down), 10);
  DPL_EXPECT_ERROR(decode_jpeg(bytes.data(), bytes.size(), "mem", {3, 1}),
                   HasSubstr("the scaling factor 3/1 is not one the decoder supports"));
  DPL_EXPECT_ERROR(decode_jpeg(bytes.data(), bytes.size(), "mem", {}, 4),
                   HasSubstr("expected 1 (grayscale) or 3 (RGB) channels, got 4"));
}

TEST_F(Jpeg, DataSetDecodesAtReducedScaleForASmallCropAndTheCropIsRightSize) {
  test::TempDir dir("dpl_jpeg");
  test::write_jpeg(dir.file("big.jpg"), test::gradient_image(512, 640));
  test::write_text(dir.file("list.txt"), "big.jpg 7\n");
  const LabeledImageDataset ds(dir.file("list.txt"), dir.path().string());

  // The centre crop of 87.5% of 512 (448 px) to 112 px: 2/8 scale leaves 112 px, exactly enough.
  const CropPlanner plan = [](int h, int w) { return CropRequest{center_crop_box(h, w), 112, 112}; };
  const CroppedExample ex = ds.get_for_crop(0, plan);
  EXPECT_EQ(ex.label, 7);
  EXPECT_LT(ex.image.width, 640);  // decoded at reduced scale
  EXPECT_EQ(ex.image.width * 512, ex.image.height * 640);
  EXPECT_GE(ex.box.width, 112);
  EXPECT_GE(ex.box.height, 112);
  EXPECT_LE(ex.box.x + ex.box.width, ex.image.width);
  EXPECT_LE(ex.box.y + ex.box.height, ex.image.height);

  // The transformed output has the crop size and matches a full-resolution decode closely.
  ImageTransform t = ImageTransform::validation(112);
  std::vector<std::uint8_t> scaled(112 * 112 * 3);
  transform_example(ds, 0, t, 0, 0, scaled.data());
  const Image full = ds.get(0).image;
  const Image reference = resize_crop(full, center_crop_box(512, 640), 112, 112);
  Image got = Image::zeros(112, 112, 3);
  got.pixels = scaled;
  EXPECT_LE(max_abs_diff(got, reference), 12);
}

TEST(JpegCodec, ReportsWhetherItIsAvailable) {
  if (jpeg_available()) {
    EXPECT_FALSE(encode_jpeg(test::gradient_image(8, 8)).empty());
    DPL_EXPECT_ERROR(encode_jpeg(Image::zeros(8, 8, 2)), HasSubstr("expected 1 (grayscale) or 3 (RGB) channels, got 2"));
    DPL_EXPECT_ERROR(encode_jpeg(test::gradient_image(8, 8), 0), HasSubstr("expected a quality in 1..100, got 0"));
  } else {
    DPL_EXPECT_ERROR(encode_jpeg(test::gradient_image(8, 8)), HasSubstr("libturbojpeg0-dev"));
  }
}

}  // namespace
