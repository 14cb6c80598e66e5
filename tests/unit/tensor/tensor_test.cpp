// Tensor: creation, random fills, views and their shared storage, copies, element access.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/sample_stats.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using test::mean_of;
using test::variance_of;

// --- creation ------------------------------------------------------------------------------------

TEST(TensorCreation, ZerosOnesFull) {
  const Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), kFloat32);
  EXPECT_EQ(z.device(), Device::cpu());
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(z.strides(), (Strides{3, 1}));
  EXPECT_THAT(z.to_vector<float>(), ElementsAre(0, 0, 0, 0, 0, 0));

  EXPECT_THAT(Tensor::ones({4}).to_vector<float>(), ElementsAre(1, 1, 1, 1));
  EXPECT_THAT(Tensor::full({2, 2}, -2.5).to_vector<float>(), ElementsAre(-2.5f, -2.5f, -2.5f, -2.5f));

  const Tensor i = Tensor::full({3}, 7, kInt32);
  EXPECT_EQ(i.dtype(), kInt32);
  EXPECT_EQ(i.nbytes(), 12u);
  EXPECT_THAT(i.to_vector<std::int32_t>(), ElementsAre(7, 7, 7));
  EXPECT_THAT(Tensor::ones({2}, kInt64).to_vector<std::int64_t>(), ElementsAre(1, 1));
}

TEST(TensorCreation, ScalarHasOneElement) {
  const Tensor s = Tensor::full({}, 3.0);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_FLOAT_EQ(s.item(), 3.f);
}

// A safetensors file could ask for such a shape: a zero extent empties a tensor, but the strides and
// the element count still multiply the other extents, which overflowed.
TEST(TensorCreation, ExtentsThatOverflowAreRefusedEvenWhenEmpty) {
  constexpr std::int64_t k = std::int64_t{1} << 62;
  for (const Shape& s : {Shape{0, k, 4}, Shape{k, 4, 0}, Shape{3, k}}) {
    SCOPED_TRACE(shape_str(s));
    DPL_EXPECT_ERROR(Tensor::empty(s),
                     AllOf(HasSubstr("Tensor::empty"), HasSubstr(shape_str(s)), HasSubstr("more than 2^63 - 1")));
  }
  EXPECT_EQ(Tensor::empty({0, k, 1}).numel(), 0);
}

TEST(TensorCreation, Arange) {
  EXPECT_THAT(Tensor::arange(0, 5).to_vector<float>(), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(Tensor::arange(1, 2, 0.25).to_vector<float>(), ElementsAre(1.f, 1.25f, 1.5f, 1.75f));
  EXPECT_THAT(Tensor::arange(5, 0, -2, kInt32).to_vector<std::int32_t>(), ElementsAre(5, 3, 1));
  EXPECT_THAT(Tensor::arange(0, 3, 1, kInt64).to_vector<std::int64_t>(), ElementsAre(0, 1, 2));
  EXPECT_EQ(Tensor::arange(3, 3).numel(), 0);
  EXPECT_EQ(Tensor::arange(3, 0).numel(), 0);
  DPL_EXPECT_ERROR(Tensor::arange(0, 1, 0), HasSubstr("arange"));
}

TEST(TensorCreation, FromVector) {
  const Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_FLOAT_EQ(t.at<float>({2, 1}), 6.f);
  const Tensor l = Tensor::from_vector<std::int32_t>({4, 5}, {2});
  EXPECT_EQ(l.dtype(), kInt32);
  EXPECT_EQ(l.at<std::int32_t>({1}), 5);
  DPL_EXPECT_ERROR(Tensor::from_vector<float>({1, 2, 3}, {2, 2}),
                   AllOf(HasSubstr("from_vector"), HasSubstr("(2, 2)"), HasSubstr("4 elements"), HasSubstr("3 values")));
}

TEST(TensorCreation, UniformIsReproducibleFromASeed) {
  Generator g1(42), g2(42), g3(43);
  const auto a = Tensor::uniform({1000}, -1.f, 1.f, g1).to_vector<float>();
  const auto b = Tensor::uniform({1000}, -1.f, 1.f, g2).to_vector<float>();
  const auto c = Tensor::uniform({1000}, -1.f, 1.f, g3).to_vector<float>();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // The generator advances: a second draw from the same generator differs from the first.
  EXPECT_NE(Tensor::uniform({1000}, -1.f, 1.f, g1).to_vector<float>(), a);
}

TEST(TensorCreation, UniformHasPlausibleMoments) {
  Generator gen(7);
  const float low = 2.f, high = 5.f;
  const auto v = Tensor::uniform({20000}, low, high, gen).to_vector<float>();
  for (float x : v) {
    ASSERT_GE(x, low);
    ASSERT_LT(x, high);
  }
  // Uniform(2, 5): mean 3.5, variance 9/12 = 0.75. The standard error of the mean over 20000
  // draws is sqrt(0.75/20000) ~ 0.006; allow about five of them.
  EXPECT_NEAR(mean_of(v), 3.5, 0.03);
  EXPECT_NEAR(variance_of(v), 0.75, 0.03);
}

TEST(TensorCreation, UniformExcludesTheUpperBoundEvenWhenFloatsAreCoarse) {
  // Floats near 2^24 are 2 apart, so low + (high - low) * u rounds to high for about half of the
  // draws unless the generator keeps the range half-open.
  Generator gen(5);
  const float low = 16777216.f, high = 16777218.f;
  for (float x : Tensor::uniform({1000}, low, high, gen).to_vector<float>()) {
    ASSERT_GE(x, low);
    ASSERT_LT(x, high);
  }
  Generator g(6);
  EXPECT_FLOAT_EQ(g.uniform(3.f, 3.f), 3.f);  // an empty range gives its one end, not NaN
}

TEST(TensorCreation, NormalIsReproducibleWithPlausibleMoments) {
  Generator g1(11), g2(11);
  const auto a = Tensor::normal({20000}, 1.5f, 2.f, g1).to_vector<float>();
  const auto b = Tensor::normal({20000}, 1.5f, 2.f, g2).to_vector<float>();
  EXPECT_EQ(a, b);
  // Standard error of the mean: 2/sqrt(20000) ~ 0.014; of the variance: 4*sqrt(2/20000) ~ 0.04.
  EXPECT_NEAR(mean_of(a), 1.5, 0.07);
  EXPECT_NEAR(variance_of(a), 4.0, 0.2);
  // Roughly 68% of the mass lies within one standard deviation.
  int inside = 0;
  for (float x : a) inside += std::fabs(x - 1.5f) < 2.f;
  EXPECT_NEAR(inside / 20000.0, 0.6827, 0.02);
}

TEST(TensorCreation, RandomFillsRejectNonFloatDtypes) {
  Generator gen(0);
  DPL_EXPECT_ERROR(Tensor::uniform({2}, 0.f, 1.f, gen, kInt32), AllOf(HasSubstr("uniform"), HasSubstr("int32")));
  DPL_EXPECT_ERROR(Tensor::normal({2}, 0.f, 1.f, gen, kInt64), AllOf(HasSubstr("normal"), HasSubstr("int64")));
}

TEST(TensorCreation, HostAllocationsAre64ByteAligned) {
  for (std::int64_t n : {1, 3, 16, 17, 1000, 4099}) {
    const Tensor t = Tensor::empty({n});
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw_data()) % kHostAlignment, 0u) << "numel " << n;
    EXPECT_GE(t.storage()->nbytes(), static_cast<std::size_t>(n) * 4);
  }
  const Tensor b = Tensor::zeros({5}, kInt64);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.raw_data()) % 64, 0u);
  // An empty tensor still gets a valid, aligned block.
  const Tensor e = Tensor::empty({0});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(e.raw_data()) % 64, 0u);
}

// --- views ---------------------------------------------------------------------------------------

TEST(TensorViews, ReshapeSharesStorage) {
  Tensor t = Tensor::arange(0, 6);
  Tensor r = t.reshape({2, 3});
  EXPECT_TRUE(r.shares_storage_with(t));
  EXPECT_EQ(r.raw_data(), t.raw_data());
  r.set<float>({1, 2}, 50.f);
  EXPECT_FLOAT_EQ(t.at<float>({5}), 50.f);
  EXPECT_EQ(t.reshape({3, -1}).shape(), (Shape{3, 2}));
  EXPECT_EQ(t.reshape({2, 3}).flatten().shape(), (Shape{6}));
  EXPECT_EQ(Tensor::zeros({2, 3, 4}).flatten(1).shape(), (Shape{2, 12}));
}

TEST(TensorViews, NarrowSharesStorageAndOffsets) {
  Tensor t = Tensor::arange(0, 12).reshape({3, 4});
  Tensor rows = t.narrow(0, 1, 2);
  EXPECT_TRUE(rows.shares_storage_with(t));
  EXPECT_EQ(rows.shape(), (Shape{2, 4}));
  EXPECT_EQ(rows.offset(), 4);
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_FLOAT_EQ(rows.at<float>({0, 0}), 4.f);

  Tensor cols = t.narrow(1, 1, 2);
  EXPECT_TRUE(cols.shares_storage_with(t));
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.strides(), (Strides{4, 1}));
  EXPECT_FLOAT_EQ(cols.at<float>({2, 1}), 10.f);
  cols.set<float>({0, 0}, -1.f);
  EXPECT_FLOAT_EQ(t.at<float>({0, 1}), -1.f);

  // Negative dimensions count from the end.
  EXPECT_EQ(t.narrow(-1, 3, 1).shape(), (Shape{3, 1}));
}

TEST(TensorViews, ViewRangeSharesStorage) {
  Tensor flat = Tensor::zeros({40});
  Tensor v = flat.view_range(16, {2, 3});
  EXPECT_TRUE(v.shares_storage_with(flat));
  EXPECT_EQ(v.offset(), 16);
  EXPECT_TRUE(v.is_contiguous());
  v.fill_(2.0);
  const auto all = flat.to_vector<float>();
  for (int i = 0; i < 40; ++i) EXPECT_FLOAT_EQ(all[i], (i >= 16 && i < 22) ? 2.f : 0.f) << "element " << i;
  // A view of a view adds the offsets.
  Tensor inner = flat.view_range(8, {32}).view_range(8, {6});
  EXPECT_EQ(inner.offset(), 16);
  EXPECT_FLOAT_EQ(inner.at<float>({0}), 2.f);
}

TEST(TensorViews, ContiguousOfANarrowViewCopiesWithStrides) {
  Tensor t = Tensor::arange(0, 24).reshape({2, 3, 4});
  Tensor v = t.narrow(2, 1, 2).narrow(1, 1, 2);  // (2, 2, 2), strides (12, 4, 1)
  ASSERT_FALSE(v.is_contiguous());
  Tensor c = v.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.shares_storage_with(t));
  EXPECT_EQ(c.shape(), (Shape{2, 2, 2}));
  EXPECT_THAT(c.to_vector<float>(), ElementsAre(5, 6, 9, 10, 17, 18, 21, 22));
  // Already contiguous: the same view comes back, no copy.
  Tensor same = t.contiguous();
  EXPECT_TRUE(same.shares_storage_with(t));
  EXPECT_EQ(same.raw_data(), t.raw_data());
}

TEST(TensorViews, ReadingAViewPastItsStorageThrows) {
  Tensor t = Tensor::zeros({10});
  DPL_EXPECT_ERROR(t.view_range(8, {3}), AllOf(HasSubstr("view_range"), HasSubstr("(3,)"), HasSubstr("offset 8"),
                                               HasSubstr("10 elements")));
  DPL_EXPECT_ERROR(t.view_range(-1, {2}), HasSubstr("view_range"));
  DPL_EXPECT_ERROR(Tensor(t.storage(), 4, {2, 4}, {4, 1}, kFloat32),
                   AllOf(HasSubstr("(2, 4)"), HasSubstr("offset 4"), HasSubstr("reaches element 11"),
                         HasSubstr("holds 10 elements")));
  // The same bytes read as int64 hold only half as many elements.
  DPL_EXPECT_ERROR(Tensor(t.storage(), 0, {6}, {1}, kInt64), HasSubstr("holds 5 elements"));
  DPL_EXPECT_ERROR(t.narrow(0, 7, 4), AllOf(HasSubstr("narrow"), HasSubstr("[7, 11)"), HasSubstr("extent 10")));
}

// --- copies --------------------------------------------------------------------------------------

TEST(TensorCopies, CopyIntoContiguousAndStridedDestinations) {
  Tensor dst = Tensor::zeros({2, 3});
  dst.copy_(Tensor::arange(1, 7).reshape({2, 3}));
  EXPECT_THAT(dst.to_vector<float>(), ElementsAre(1, 2, 3, 4, 5, 6));

  Tensor big = Tensor::zeros({3, 4});
  Tensor window = big.narrow(1, 1, 2);
  window.copy_(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}));
  EXPECT_THAT(big.to_vector<float>(), ElementsAre(0, 1, 2, 0, 0, 3, 4, 0, 0, 5, 6, 0));

  // Strided source into a contiguous destination.
  Tensor back = Tensor::zeros({3, 2});
  back.copy_(window);
  EXPECT_THAT(back.to_vector<float>(), ElementsAre(1, 2, 3, 4, 5, 6));

  DPL_EXPECT_ERROR(dst.copy_(Tensor::zeros({3, 2})), AllOf(HasSubstr("copy_"), HasSubstr("(2, 3)"), HasSubstr("(3, 2)")));
  DPL_EXPECT_ERROR(dst.copy_(Tensor::zeros({2, 3}, kInt32)), AllOf(HasSubstr("copy_"), HasSubstr("int32")));
}

TEST(TensorCopies, CloneOwnsItsData) {
  Tensor a = Tensor::arange(0, 4);
  Tensor b = a.clone();
  EXPECT_FALSE(b.shares_storage_with(a));
  b.set<float>({0}, 9.f);
  EXPECT_FLOAT_EQ(a.at<float>({0}), 0.f);
  EXPECT_THAT(b.to_vector<float>(), ElementsAre(9, 1, 2, 3));
  // Cloning a strided view yields a dense copy of just the view.
  Tensor v = Tensor::arange(0, 6).reshape({2, 3}).narrow(1, 2, 1).clone();
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_THAT(v.to_vector<float>(), ElementsAre(2, 5));
}

TEST(TensorCopies, FillOfAStridedViewTouchesOnlyTheView) {
  Tensor t = Tensor::zeros({2, 3});
  t.narrow(1, 0, 1).fill_(4.0);
  EXPECT_THAT(t.to_vector<float>(), ElementsAre(4, 0, 0, 4, 0, 0));
}

TEST(TensorCopies, ToTheSameDeviceIsTheSameTensor) {
  Tensor t = Tensor::ones({3});
  EXPECT_TRUE(t.to(Device::cpu()).shares_storage_with(t));
}

TEST(TensorCopies, CudaWithoutABackendFailsClearly) {
  if (cuda_is_available()) GTEST_SKIP() << "this build has a usable GPU";
  DPL_EXPECT_ERROR(Tensor::zeros({2}, Device::cuda(0)), HasSubstr("cuda:0"));
}

// --- element access ------------------------------------------------------------------------------

TEST(TensorAccess, AtSetItemAndChecks) {
  Tensor t = Tensor::zeros({2, 3});
  t.set<float>({1, 2}, 3.5f);
  EXPECT_FLOAT_EQ(t.at<float>({1, 2}), 3.5f);
  EXPECT_FLOAT_EQ(t.data<float>()[5], 3.5f);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.size(-1), 3);
  EXPECT_FLOAT_EQ(t.view_range(5, {}).item(), 3.5f);

  DPL_EXPECT_ERROR(t.at<float>({1}), AllOf(HasSubstr("expected 2 indices"), HasSubstr("(2, 3)")));
  DPL_EXPECT_ERROR(t.at<float>({0, 3}), AllOf(HasSubstr("index 3"), HasSubstr("extent 3")));
  DPL_EXPECT_ERROR(t.at<std::int32_t>({0, 0}), AllOf(HasSubstr("int32"), HasSubstr("float32")));
  DPL_EXPECT_ERROR(t.item(), AllOf(HasSubstr("item"), HasSubstr("(2, 3)")));
  DPL_EXPECT_ERROR(t.size(2), HasSubstr("dimension 2"));
  DPL_EXPECT_ERROR(Tensor().raw_data(), HasSubstr("undefined"));
}

TEST(TensorAccess, PrintsShapeDtypeAndValues) {
  std::ostringstream os;
  os << Tensor::arange(0, 3);
  EXPECT_THAT(os.str(), AllOf(HasSubstr("(3,)"), HasSubstr("float32"), HasSubstr("cpu"), HasSubstr("0, 1, 2")));
}

// --- uint8: storage for 8-bit images, no math -----------------------------------------------------

TEST(TensorUInt8, CreatesCopiesAndReadsBytes) {
  EXPECT_EQ(dtype_size(kUInt8), 1u);
  EXPECT_STREQ(dtype_name(kUInt8), "uint8");
  EXPECT_EQ(dtype_of<std::uint8_t>(), kUInt8);
  EXPECT_FALSE(is_float_dtype(kUInt8));

  const Tensor z = Tensor::zeros({2, 3}, kUInt8);
  EXPECT_EQ(z.dtype(), kUInt8);
  EXPECT_EQ(z.nbytes(), 6u);
  EXPECT_EQ(z.to_vector<std::uint8_t>(), std::vector<std::uint8_t>(6, 0));
  EXPECT_EQ(Tensor::full({3}, 255, kUInt8).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{255, 255, 255}));

  const Tensor t = Tensor::from_vector<std::uint8_t>({0, 1, 2, 3, 254, 255}, {2, 3});
  EXPECT_EQ(t.at<std::uint8_t>({1, 2}), 255);
  const Tensor c = t.clone();
  EXPECT_FALSE(c.shares_storage_with(t));
  c.data<std::uint8_t>()[0] = 7;
  EXPECT_EQ(t.at<std::uint8_t>({0, 0}), 0);
  EXPECT_EQ(c.at<std::uint8_t>({0, 0}), 7);
  EXPECT_TRUE(t.to(Device::cpu()).shares_storage_with(t));

  // One-byte elements through the strided copy and the strided fill.
  const Tensor column = t.narrow(1, 1, 1);
  EXPECT_EQ(column.contiguous().to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{1, 254}));
  Tensor u = Tensor::from_vector<std::uint8_t>({9, 9, 9, 9, 9, 9}, {2, 3});
  u.narrow(1, 0, 1).fill_(5);
  EXPECT_EQ(u.to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{5, 9, 9, 5, 9, 9}));
  u.narrow(1, 2, 1).copy_(column);
  EXPECT_EQ(u.to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{5, 9, 1, 5, 9, 254}));
  u.set<std::uint8_t>({0, 1}, 200);
  EXPECT_EQ(u.at<std::uint8_t>({0, 1}), 200);
}

TEST(TensorUInt8, PrintsValuesAsNumbers) {
  std::ostringstream os;
  os << Tensor::from_vector<std::uint8_t>({0, 65, 255}, {3});
  EXPECT_THAT(os.str(), AllOf(HasSubstr("uint8"), HasSubstr("values=[0, 65, 255]")));
}

TEST(TensorUInt8, MathAndConversionsRefuseItByName) {
  const Tensor t = Tensor::from_vector<std::uint8_t>({1, 2, 3, 4}, {2, 2});
  DPL_EXPECT_ERROR(t.to(kFloat32), AllOf(HasSubstr("uint8"), HasSubstr("float32, bfloat16 and float16")));
  DPL_EXPECT_ERROR(Tensor::zeros({2}).copy_(Tensor::zeros({2}, kUInt8)),
                   AllOf(HasSubstr("expected a source of dtype float32"), HasSubstr("got uint8")));
  DPL_EXPECT_ERROR(t.at<float>({0, 0}), AllOf(HasSubstr("expected dtype float32"), HasSubstr("got uint8")));
  DPL_EXPECT_ERROR(relu(Variable(t)),
                   AllOf(HasSubstr("relu"), HasSubstr("float32, bfloat16 or float16"), HasSubstr("got uint8")));
  DPL_EXPECT_ERROR(add(Variable(t), Variable(t)), HasSubstr("got uint8"));
  DPL_EXPECT_ERROR(Tensor::zeros({1}, kUInt8).item(), HasSubstr("got uint8"));
}

}  // namespace
}  // namespace dpl
