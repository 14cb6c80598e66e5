// The image files real data sets hold beside plain JPEGs: CMYK and YCCK JPEGs, and PNGs of every
// colour type (one named .jpg). The fixtures in tests/golden/images/ are written by
// tests/golden/make_image_fixtures.py; their pixels follow a pattern this test computes too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dpl/data.hpp"
#include "support/expect_error.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;
using namespace dpl::data;
using ::testing::HasSubstr;

std::string fixture(const std::string& name) { return std::string(DPL_SOURCE_DIR) + "/tests/golden/images/" + name; }

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Image decode(const std::string& name, int channels = 3) {
  const std::vector<std::uint8_t> bytes = read_file(fixture(name));
  return decode_image(bytes.data(), bytes.size(), name, {}, channels);
}

// The fixtures' pattern (make_image_fixtures.py): 3 x 4 pixels.
int value(int y, int x, int c) { return (y * 4 + x) * 20 + c * 7; }
int luma(int r, int g, int b) { return static_cast<int>(0.299 * r + 0.587 * g + 0.114 * b + 0.5); }

// Every pixel of img (RGB, or grey) equals expect(y, x, c) within tol.
template <typename F>
void expect_pixels(const Image& img, int channels, F expect, int tol, const std::string& what) {
  ASSERT_EQ(img.height, 3) << what;
  ASSERT_EQ(img.width, 4) << what;
  ASSERT_EQ(img.channels, channels) << what;
  ASSERT_TRUE(img.valid()) << what;
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < channels; ++c) {
        const int got = img.pixels[static_cast<std::size_t>((y * 4 + x) * channels + c)];
        EXPECT_NEAR(got, expect(y, x, c), tol) << what << " at y " << y << ", x " << x << ", channel " << c;
      }
}

class PngFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!png_available()) GTEST_SKIP() << "this build has no PNG decoder (libpng-dev)";
  }
};

TEST_F(PngFiles, GreyFilesDecodeToGreyOrReplicatedRgb) {
  for (const char* name : {"grey8.png", "grey16.png", "grey_alpha8.png"}) {
    expect_pixels(decode(name, 1), 1, [](int y, int x, int) { return value(y, x, 0); }, 0, name);
    expect_pixels(decode(name, 3), 3, [](int y, int x, int) { return value(y, x, 0); }, 0, name);
  }
  // 1 bit per pixel: white where x + y is odd.
  expect_pixels(decode("grey1.png", 3), 3, [](int y, int x, int) { return (x + y) % 2 ? 255 : 0; }, 0, "grey1.png");
}

TEST_F(PngFiles, ColourFilesDecodeToRgbWithAlphaDroppedOrToGrey) {
  for (const char* name : {"rgb8.png", "rgb16.png", "rgba8.png", "rgba16.png", "palette8.png"}) {
    // Exact: alpha (and the palette's tRNS) never changes the colour samples.
    expect_pixels(decode(name, 3), 3, [](int y, int x, int c) { return value(y, x, c); }, 0, name);
    expect_pixels(decode(name, 1), 1,
                  [](int y, int x, int) { return luma(value(y, x, 0), value(y, x, 1), value(y, x, 2)); }, 1, name);
  }
}

TEST_F(PngFiles, APngNamedJpgIsDecodedByItsSignatureAndSizedByItsHeader) {
  const std::vector<std::uint8_t> bytes = read_file(fixture("png_named.jpg"));
  EXPECT_EQ(image_format(bytes.data(), bytes.size()), ImageFormat::kPng);
  const JpegSize size = read_image_size(bytes.data(), bytes.size(), "png_named.jpg");
  EXPECT_EQ(size.width, 4);
  EXPECT_EQ(size.height, 3);
  expect_pixels(decode("png_named.jpg"), 3, [](int y, int x, int c) { return value(y, x, c); }, 0, "png_named.jpg");
  DPL_EXPECT_ERROR((void)decode_image(bytes.data(), bytes.size(), "p.jpg", {1, 2}), HasSubstr("p.jpg: a PNG is decoded at full size only, got the scale 1/2"));
}

TEST_F(PngFiles, DamagedFilesAreRefusedWithTheirName) {
  std::vector<std::uint8_t> bytes = read_file(fixture("rgb8.png"));
  const std::vector<std::uint8_t> truncated(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2));
  DPL_EXPECT_ERROR((void)decode_png(truncated.data(), truncated.size(), "list.txt:3: t.png"), HasSubstr("list.txt:3: t.png: corrupt or truncated PNG: "));
  bytes[40] ^= 0xFF;  // inside IDAT: its CRC no longer matches
  DPL_EXPECT_ERROR((void)decode_png(bytes.data(), bytes.size(), "c.png"), HasSubstr("c.png: corrupt or truncated PNG: "));
  const std::vector<std::uint8_t> header_only(bytes.begin(), bytes.begin() + 8);
  DPL_EXPECT_ERROR((void)read_png_size(header_only.data(), header_only.size(), "h.png"), HasSubstr("h.png: not a readable PNG header: "));
  DPL_EXPECT_ERROR((void)decode_png(bytes.data(), bytes.size(), "c.png", 2), HasSubstr("expected 1 (grey) or 3 (RGB) channels, got 2"));
}

TEST(ImageFormat, OnlyThePngSignatureMakesAPng) {
  const std::uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  EXPECT_TRUE(has_png_signature(sig, 8));
  EXPECT_FALSE(has_png_signature(sig, 7));
  const std::uint8_t jpeg[4] = {0xFF, 0xD8, 0xFF, 0xE0};
  EXPECT_EQ(image_format(jpeg, 4), ImageFormat::kJpeg);
  EXPECT_EQ(image_format(nullptr, 0), ImageFormat::kJpeg);
}

class CmykJpeg : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!jpeg_available()) GTEST_SKIP() << "this build has no JPEG codec (libturbojpeg0-dev)";
  }
};

// The fixtures' two 8 x 8 blocks of inks (C, M, Y, K), left and right, and the RGB Adobe's
// convention gives them: 255 * (1 - ink) * (1 - black) per channel.
const int kInks[2][4] = {{0, 128, 255, 64}, {200, 30, 90, 0}};
int expected_rgb(int block, int c) { return static_cast<int>((255 - kInks[block][c]) * (255 - kInks[block][3]) / 255.0 + 0.5); }

TEST_F(CmykJpeg, CmykAndYcckJpegsDecodeToRgbByAdobesInvertedConvention) {
  for (const char* name : {"cmyk.jpg", "ycck.jpg"}) {
    const std::vector<std::uint8_t> bytes = read_file(fixture(name));
    const JpegSize size = read_image_size(bytes.data(), bytes.size(), name);
    EXPECT_EQ(size.width, 16);
    EXPECT_EQ(size.height, 8);
    const Image rgb = decode_image(bytes.data(), bytes.size(), name);
    ASSERT_EQ(rgb.channels, 3);
    ASSERT_EQ(rgb.width, 16);
    ASSERT_EQ(rgb.height, 8);
    const Image grey = decode_image(bytes.data(), bytes.size(), name, {}, 1);
    ASSERT_EQ(grey.channels, 1);
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 16; ++x) {
        const int b = x / 8;
        for (int c = 0; c < 3; ++c)
          EXPECT_NEAR(rgb.pixels[static_cast<std::size_t>((y * 16 + x) * 3 + c)], expected_rgb(b, c), 2)
              << name << " at y " << y << ", x " << x << ", channel " << c;
        EXPECT_NEAR(grey.pixels[static_cast<std::size_t>(y * 16 + x)],
                    luma(expected_rgb(b, 0), expected_rgb(b, 1), expected_rgb(b, 2)), 2)
            << name << " grey at y " << y << ", x " << x;
      }
    // Scaled in the DCT domain like any JPEG: 1/2 gives 4 x 8 of the same colours.
    const Image half = decode_image(bytes.data(), bytes.size(), name, {1, 2});
    ASSERT_EQ(half.width, 8);
    ASSERT_EQ(half.height, 4);
    EXPECT_NEAR(half.pixels[0], expected_rgb(0, 0), 3) << name;
    EXPECT_NEAR(half.pixels[(4 * 8 - 1) * 3 + 2], expected_rgb(1, 2), 3) << name;
  }
}

}  // namespace
