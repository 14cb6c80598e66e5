// Crops, bilinear resizing, flips, per-sample generators, normalisation, and the in-memory
// adapter that serves MNIST-style data sets as images.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "dpl/data.hpp"
#include "support/expect_error.hpp"
#include "support/images.hpp"

namespace {
using namespace dpl;
using namespace dpl::data;
using ::testing::HasSubstr;

TEST(ImageTransforms, RandomResizedCropBoxesLieInsideWithinScaleAndRatio) {
  Generator gen(3);
  std::set<int> widths;
  for (int i = 0; i < 500; ++i) {
    const CropBox b = random_resized_crop_box(300, 400, gen);
    ASSERT_GT(b.width, 0);
    ASSERT_GT(b.height, 0);
    ASSERT_GE(b.x, 0);
    ASSERT_GE(b.y, 0);
    ASSERT_LE(b.x + b.width, 400);
    ASSERT_LE(b.y + b.height, 300);
    const double area = static_cast<double>(b.width) * b.height / (300.0 * 400.0);
    const double ratio = static_cast<double>(b.width) / b.height;
    // Rounding each side to whole pixels moves area and ratio by a little.
    EXPECT_GE(area, 0.08 * 0.95);
    EXPECT_LE(area, 1.0);
    EXPECT_GE(ratio, 0.75 * 0.97);
    EXPECT_LE(ratio, 4.0 / 3.0 * 1.03);
    widths.insert(b.width);
  }
  EXPECT_GT(widths.size(), 50u) << "the boxes should vary";

  // A sliver that no draw can fit falls back to the centred box with the ratio clamped.
  const CropBox f = random_resized_crop_box(10, 1000, gen, 0.5, 1.0);
  EXPECT_EQ(f.height, 10);
  EXPECT_EQ(f.width, 13);  // round(10 * 4/3)
  EXPECT_EQ(f.x, (1000 - 13) / 2);
  DPL_EXPECT_ERROR(random_resized_crop_box(10, 10, gen, 0.0, 1.0), HasSubstr("expected 0 < scale_min <= scale_max <= 1"));
}

TEST(ImageTransforms, CenterAndRandomCropsKeepTheShorterSideFraction) {
  const CropBox c = center_crop_box(256, 320);  // 224 of 256
  EXPECT_EQ(c.width, 224);
  EXPECT_EQ(c.height, 224);
  EXPECT_EQ(c.x, 48);
  EXPECT_EQ(c.y, 16);
  Generator gen(5);
  std::set<int> xs;
  for (int i = 0; i < 100; ++i) {
    const CropBox r = random_crop_box(256, 320, gen);
    ASSERT_EQ(r.width, 224);
    ASSERT_LE(r.x + r.width, 320);
    ASSERT_LE(r.y + r.height, 256);
    xs.insert(r.x);
  }
  EXPECT_GT(xs.size(), 20u);
  DPL_EXPECT_ERROR(center_crop_box(10, 10, 1.5), HasSubstr("expected a crop fraction in (0, 1], got 1.5"));
}

TEST(ImageTransforms, ResizeIsIdentityAtSameSizeAndFlipMirrors) {
  const Image src = test::gradient_image(20, 30, 3);
  const Image same = resize_crop(src, {0, 0, 30, 20}, 20, 30);
  EXPECT_EQ(same.pixels, src.pixels);
  const Image flipped = resize_crop(src, {0, 0, 30, 20}, 20, 30, true);
  for (int y = 0; y < 20; ++y)
    for (int x = 0; x < 30; ++x)
      for (int c = 0; c < 3; ++c)
        ASSERT_EQ(flipped.pixels[(y * 30 + x) * 3 + c], src.pixels[(y * 30 + (29 - x)) * 3 + c]) << y << "," << x;

  // A crop at the same size copies the region.
  const Image crop = resize_crop(src, {5, 4, 10, 8}, 8, 10);
  EXPECT_EQ(crop.pixels[0], src.pixels[(4 * 30 + 5) * 3]);

  // Halving a 2x2 checker of 0 and 200 averages it.
  Image checker = Image::zeros(2, 2, 1);
  checker.pixels = {0, 200, 200, 0};
  const Image one = resize_crop(checker, {0, 0, 2, 2}, 1, 1);
  EXPECT_EQ(one.pixels[0], 100);
  // Doubling interpolates between neighbours (pixel centres aligned: 0, 50, 150, 200 along a row).
  Image ramp = Image::zeros(1, 2, 1);
  ramp.pixels = {0, 200};
  const Image wide = resize_crop(ramp, {0, 0, 2, 1}, 1, 4);
  EXPECT_EQ(wide.pixels, (std::vector<std::uint8_t>{0, 50, 150, 200}));

  std::vector<std::uint8_t> out(9);
  DPL_EXPECT_ERROR(resize_crop(src, {25, 0, 10, 10}, 3, 3, false, out.data()),
                   HasSubstr("the box (x 25, y 0, 10 x 10) does not lie inside the 30 x 20 image"));
}

// A data set of random RGB images whose label is the index.
class RandomImages : public RandomAccessDataset {
 public:
  RandomImages(std::int64_t n, int side) : n_(n), side_(side) {}
  std::int64_t size() const override { return n_; }
  int channels() const override { return 3; }
  Example get(std::int64_t i) const override {
    Generator g(static_cast<std::uint64_t>(i) + 100);
    Example e;
    e.image = Image::zeros(side_, side_ + static_cast<int>(i % 5), 3);
    for (auto& p : e.image.pixels) p = static_cast<std::uint8_t>(g.below(256));
    e.label = static_cast<std::int32_t>(i);
    return e;
  }

 private:
  std::int64_t n_;
  int side_;
};

TEST(ImageTransforms, TransformExampleDependsOnSeedEpochAndIndexOnly) {
  const RandomImages ds(10, 40);
  const ImageTransform t = ImageTransform::train(16);
  std::vector<std::uint8_t> a(16 * 16 * 3), b(a.size()), c(a.size());
  EXPECT_EQ(transform_example(ds, 4, t, 7, 2, a.data()), 4);
  transform_example(ds, 9, t, 7, 2, c.data());  // another sample in between changes nothing
  transform_example(ds, 4, t, 7, 2, b.data());
  EXPECT_EQ(a, b);
  transform_example(ds, 4, t, 7, 3, b.data());
  EXPECT_NE(a, b) << "another epoch draws another crop";
  transform_example(ds, 4, t, 8, 2, b.data());
  EXPECT_NE(a, b) << "another seed draws another crop";

  // Over many samples, about half are flipped: compare with the same crop unflipped.
  ImageTransform no_flip = t;
  no_flip.flip = false;
  int flipped = 0;
  for (std::int64_t e = 0; e < 200; ++e) {
    transform_example(ds, 1, t, 11, e, a.data());
    transform_example(ds, 1, no_flip, 11, e, b.data());
    if (a != b) ++flipped;
  }
  EXPECT_GT(flipped, 70);
  EXPECT_LT(flipped, 130);
}

TEST(ImageTransforms, NormalizeToFloatIsChannelsLastAndPerChannel) {
  // n=2, h=1, w=2, c=3.
  const std::vector<std::uint8_t> px = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110};
  const Tensor t = normalize_to_float(px.data(), 2, 1, 2, 3, {10, 20, 30}, {2, 4, 5});
  EXPECT_EQ(t.shape(), (Shape{2, 3, 1, 2}));
  EXPECT_TRUE(t.is_channels_last());
  EXPECT_FLOAT_EQ(t.at<float>({0, 0, 0, 0}), (0 - 10) / 2.0f);
  EXPECT_FLOAT_EQ(t.at<float>({0, 1, 0, 0}), (10 - 20) / 4.0f);
  EXPECT_FLOAT_EQ(t.at<float>({0, 2, 0, 1}), (50 - 30) / 5.0f);
  EXPECT_FLOAT_EQ(t.at<float>({1, 0, 0, 1}), (90 - 10) / 2.0f);
  // One value stands for every channel.
  const Tensor u = normalize_to_float(px.data(), 2, 1, 2, 3, {0}, {255});
  EXPECT_FLOAT_EQ(u.at<float>({1, 2, 0, 1}), 110 / 255.0f);
  DPL_EXPECT_ERROR(normalize_to_float(px.data(), 2, 1, 2, 3, {1, 2}, {1}),
                   HasSubstr("expected mean of 3 values (one per channel) or 1, got 2"));
  DPL_EXPECT_ERROR(normalize_to_float(px.data(), 2, 1, 2, 3, {0}, {1, 0, 1}),
                   HasSubstr("std of channel 1 is 0"));
}

TEST(ImageTransforms, InMemoryAdapterRestoresTheBytesOfFloatSamples) {
  // Two 2x2 grayscale samples as load_mnist makes them: byte / 255.
  const std::vector<float> v = {0.f, 1.f / 255, 128.f / 255, 1.f, 7.f / 255, 200.f / 255, 254.f / 255, 3.f / 255};
  const Dataset ds(Tensor::from_vector(v, {2, 4}), Tensor::from_vector(std::vector<std::int32_t>{5, 9}, {2}));
  const InMemoryImageDataset images(ds, 2, 2, 1);
  EXPECT_EQ(images.size(), 2);
  EXPECT_EQ(images.channels(), 1);
  const Example e = images.get(1);
  EXPECT_EQ(e.label, 9);
  EXPECT_EQ(e.image.height, 2);
  EXPECT_EQ(e.image.pixels, (std::vector<std::uint8_t>{7, 200, 254, 3}));
  DPL_EXPECT_ERROR(images.get(2), HasSubstr("index 2 is outside a data set of 2 examples"));
  DPL_EXPECT_ERROR(InMemoryImageDataset(ds, 3, 3, 1), HasSubstr("hold 4 values but 3 x 3 x 1 images need 9"));
  // The default crop path hands back the full image and the planner's box.
  const CroppedExample c = images.get_for_crop(0, [](int h, int w) { return CropRequest{{0, 0, w, h - 1}, 1, 1}; });
  EXPECT_EQ(c.box.height, 1);
  EXPECT_EQ(c.image.pixels, (std::vector<std::uint8_t>{0, 1, 128, 255}));
}

}  // namespace
