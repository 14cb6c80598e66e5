// Tensor's memory formats: channels-last views and copies, memory_format(), and dtype
// conversion in memory order.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/gradcheck.hpp"
#include "support/memory_formats.hpp"

namespace dpl {
namespace {

using ::testing::HasSubstr;
using test::expect_same_values;
using test::is_nhwc;

Tensor randn(const Shape& s, Generator& gen) { return test::away_from_zero(s, gen); }

TEST(ChannelsLast, TensorHelpers) {
  Generator gen(1);
  const Tensor t = randn({2, 3, 4, 5}, gen);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_FALSE(t.is_channels_last());
  const Tensor cl = t.to_channels_last();
  EXPECT_TRUE(cl.is_channels_last());
  EXPECT_FALSE(cl.is_contiguous());
  EXPECT_EQ(cl.shape(), t.shape());
  EXPECT_EQ(cl.strides(), (Strides{60, 1, 15, 3}));
  EXPECT_EQ(cl.to_vector<float>(), t.to_vector<float>());  // same logical values
  EXPECT_EQ(cl.to_channels_last().raw_data(), cl.raw_data());
  // One channel: both layouts are the same memory order.
  EXPECT_TRUE(Tensor::empty({2, 1, 3, 3}).is_channels_last());
  DPL_EXPECT_ERROR(Tensor::empty_channels_last({2, 3}), HasSubstr("expected a 4-D shape"));
}

TEST(MemoryFormat, DtypeConversionKeepsChannelsLast) {
  Generator gen(10);
  const Tensor x = Tensor::uniform({2, 3, 4, 5}, -1.f, 1.f, gen);
  const Tensor half = x.to_channels_last().to(kBFloat16);
  EXPECT_TRUE(is_nhwc(half));
  expect_same_values(half.to(kFloat32), x.to(kBFloat16).to(kFloat32), "bfloat16 values");
  EXPECT_TRUE(is_nhwc(half.to(kFloat32)));
}

TEST(MemoryFormat, NamesTheLayoutAndCountsATensorThatIsBothAsContiguous) {
  EXPECT_EQ(Tensor::empty({2, 3, 4, 5}).memory_format(), MemoryFormat::kContiguous);
  EXPECT_EQ(Tensor::empty_channels_last({2, 3, 4, 5}).memory_format(), MemoryFormat::kChannelsLast);
  EXPECT_EQ(Tensor::empty({2, 3, 4, 5}).to_channels_last().memory_format(), MemoryFormat::kChannelsLast);
  // One channel, or a 1x1 image: both layouts have one memory order, and the strides as laid out
  // decide, so such a tensor keeps the format it was made in and empty_like its strides.
  for (const Shape& shape : {Shape{2, 1, 4, 5}, Shape{2, 3, 1, 1}}) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor nhwc = Tensor::empty_channels_last(shape);
    EXPECT_EQ(nhwc.memory_format(), MemoryFormat::kChannelsLast);
    EXPECT_EQ(Tensor::empty_like(nhwc).strides(), nhwc.strides());
    EXPECT_EQ(Tensor::empty(shape).memory_format(), MemoryFormat::kContiguous);
    EXPECT_EQ(Tensor::empty_like(Tensor::empty(shape)).strides(), contiguous_strides(shape));
  }
  // Where the two layouts' strides are the same, contiguous.
  EXPECT_EQ(Tensor::empty_channels_last({2, 1, 1, 1}).memory_format(), MemoryFormat::kContiguous);
  EXPECT_EQ(Tensor::empty({6}).memory_format(), MemoryFormat::kContiguous);
  // A strided view that is neither reports contiguous; empty_like follows memory_format.
  EXPECT_EQ(Tensor::empty({2, 3, 4, 5}).narrow(3, 0, 2).memory_format(), MemoryFormat::kContiguous);
  EXPECT_EQ(Tensor::empty_like(Tensor::empty_channels_last({2, 3, 4, 5})).memory_format(),
            MemoryFormat::kChannelsLast);
}

}  // namespace
}  // namespace dpl
