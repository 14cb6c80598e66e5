// normalize_images on the CPU: bit-for-bit agreement with the reference normalize_to_float in both
// memory formats and for 1 and 3 channels, the single rounding to bfloat16 and float16, and the
// errors for input that is not a packed uint8 NHWC batch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"

namespace dpl {
namespace {

using data::normalize_images;
using data::normalize_to_float;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Every byte value appears (the batch is at least 256 bytes), in an order that differs per channel.
std::vector<std::uint8_t> pixels(std::int64_t n, int h, int w, int c) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n * h * w * c));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>((i * 37 + i / 256) % 256);
  return v;
}

// The 16-bit tensor's raw bits, for exact comparisons.
std::vector<std::uint16_t> bits_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const std::uint16_t*>(c.raw_data());
  return std::vector<std::uint16_t>(p, p + c.numel());
}

struct Case {
  std::int64_t n;
  int h, w, c;
  std::vector<float> mean, std;
};

std::vector<Case> cases() {
  return {
      {2, 5, 7, 3, {123.675f, 116.28f, 103.53f}, {58.395f, 57.12f, 57.375f}},  // ImageNet's
      {3, 6, 4, 1, {33.3f}, {78.5f}},                                          // grey (MNIST-like)
      {2, 4, 9, 3, {0.f}, {255.f}},                                            // [0, 1], one value for all
  };
}

TEST(NormalizeImages, Float32EqualsTheReferenceBitForBitInBothFormats) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(::testing::Message() << "channels " << k.c);
    const std::vector<std::uint8_t> bytes = pixels(k.n, k.h, k.w, k.c);
    const Tensor images = Tensor::from_vector(bytes, {k.n, k.h, k.w, k.c});
    const Tensor want = normalize_to_float(bytes.data(), k.n, k.h, k.w, k.c, k.mean, k.std);

    const Tensor last = normalize_images(images, k.mean, k.std);  // defaults: float32, channels-last
    EXPECT_EQ(last.shape(), (Shape{k.n, k.c, k.h, k.w}));
    EXPECT_EQ(last.dtype(), kFloat32);
    EXPECT_EQ(last.device(), Device::cpu());
    EXPECT_TRUE(last.is_channels_last());
    EXPECT_EQ(last.strides(), want.strides());
    EXPECT_EQ(last.contiguous().to_vector<float>(), want.contiguous().to_vector<float>());

    const Tensor nchw = normalize_images(images, k.mean, k.std, kFloat32, MemoryFormat::kContiguous);
    EXPECT_EQ(nchw.shape(), (Shape{k.n, k.c, k.h, k.w}));
    EXPECT_TRUE(nchw.is_contiguous());
    EXPECT_EQ(nchw.to_vector<float>(), want.contiguous().to_vector<float>());
  }
}

TEST(NormalizeImages, SixteenBitResultsAreTheFloat32ValuesRoundedOnce) {
  for (const Case& k : cases()) {
    const std::vector<std::uint8_t> bytes = pixels(k.n, k.h, k.w, k.c);
    const Tensor images = Tensor::from_vector(bytes, {k.n, k.h, k.w, k.c});
    const Tensor want = normalize_to_float(bytes.data(), k.n, k.h, k.w, k.c, k.mean, k.std);
    for (DType dt : {kBFloat16, kFloat16}) {
      for (MemoryFormat f : {MemoryFormat::kChannelsLast, MemoryFormat::kContiguous}) {
        SCOPED_TRACE(::testing::Message() << dt << " channels " << k.c << " channels-last "
                                          << (f == MemoryFormat::kChannelsLast));
        const Tensor got = normalize_images(images, k.mean, k.std, dt, f);
        EXPECT_EQ(got.dtype(), dt);
        EXPECT_EQ(f == MemoryFormat::kContiguous ? got.is_contiguous() : got.is_channels_last(), true);
        // Tensor::to rounds float32 to nearest even: the one rounding the result may have.
        EXPECT_EQ(bits_of(got), bits_of(want.to(dt)));
      }
    }
  }
}

TEST(NormalizeImages, AnEmptyBatchGivesAnEmptyTensor) {
  const Tensor out = normalize_images(Tensor::empty({0, 4, 4, 3}, kUInt8), {1.f}, {2.f});
  EXPECT_EQ(out.shape(), (Shape{0, 3, 4, 4}));
}

TEST(NormalizeImages, RefusesWhatIsNotAPackedUInt8BatchSayingWhatCame) {
  const Tensor images = Tensor::zeros({2, 4, 4, 3}, kUInt8);
  const std::vector<float> mean = {1.f, 2.f, 3.f}, std = {4.f, 5.f, 6.f};
  DPL_EXPECT_ERROR(normalize_images(Tensor::zeros({2, 4, 4, 3}), mean, std),
                   AllOf(HasSubstr("normalize_images"), HasSubstr("expected images of dtype uint8, got float32")));
  DPL_EXPECT_ERROR(normalize_images(Tensor::zeros({4, 4, 3}, kUInt8), mean, std),
                   AllOf(HasSubstr("expected images of shape (N, H, W, C)"), HasSubstr("(4, 4, 3)")));
  DPL_EXPECT_ERROR(normalize_images(images.narrow(2, 0, 2), mean, std),
                   AllOf(HasSubstr("expected packed (contiguous) NHWC images"), HasSubstr("strides")));
  DPL_EXPECT_ERROR(normalize_images(images, {1.f, 2.f}, std),
                   AllOf(HasSubstr("expected mean of 3 values (one per channel) or 1, got 2")));
  DPL_EXPECT_ERROR(normalize_images(images, mean, {1.f, 2.f, 3.f, 4.f}),
                   HasSubstr("expected std of 3 values (one per channel) or 1, got 4"));
  DPL_EXPECT_ERROR(normalize_images(Tensor::zeros({1, 2, 2, 1}, kUInt8), mean, std),
                   HasSubstr("expected mean of 1 values (one per channel) or 1, got 3"));
  DPL_EXPECT_ERROR(normalize_images(images, mean, {1.f, 0.f, 1.f}), HasSubstr("std of channel 1 is 0"));
  DPL_EXPECT_ERROR(normalize_images(images, mean, std, kInt32),
                   HasSubstr("expected an output dtype float32, bfloat16 or float16, got int32"));
  DPL_EXPECT_ERROR(normalize_images(Tensor::zeros({1, 2, 2, 17}, kUInt8), {0.f}, {1.f}),
                   AllOf(HasSubstr("expected 1 to 16 channels"), HasSubstr("(1, 2, 2, 17)")));
  DPL_EXPECT_ERROR(normalize_images(Tensor(), mean, std), HasSubstr("got an undefined tensor"));
}

}  // namespace
}  // namespace dpl
