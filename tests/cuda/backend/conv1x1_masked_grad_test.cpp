// The data gradient of a 1x1 stride-1 convolution completed, masked and reduced for the batch norm
// before it in one CUTLASS product (src/backend/cuda/cutlass/conv1x1.hpp,
// conv1x1_backward_data_masked_sums) against the host: g = (y > 0) ? g0 + gy · w : 0 from the same
// 16-bit values, and the channel sums of g and g · (x − mean).
//
// Tolerances. The product's terms are exact in float32 and added in float32 with the prior g0,
// then rounded once: each element within u|want| + 2^-14 times the sum of the terms' magnitudes
// (expect_near_exact_sum). The sums are those of the stored g, added in float32: within 1e-5 of
// the sums of magnitudes (as ConvSumsTest holds the forward's).

#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "dpl/config.hpp"
#if DPL_WITH_CUTLASS_SM90
#include "backend/cuda/cutlass/conv1x1.hpp"
#include "backend/side_lane.hpp"
#endif

namespace dpl::test {
namespace {

#if DPL_WITH_CUTLASS_SM90

using backend::Conv2dParams;
using backend::cuda_detail::conv1x1_backward_data_masked_sums;

struct Case {
  const char* name;
  std::int64_t n, c, h, w, o;
};

const std::vector<Case> kCases = {
    {"first stage 64 <- 256, 14x14", 4, 64, 14, 14, 256},
    {"256 <- 64, rows not a multiple of 128", 3, 256, 9, 11, 64},
    {"40 <- 136 channels", 2, 40, 7, 7, 136},
    {"last stage 2048 <- 512, 7x7", 4, 2048, 7, 7, 512},
    // 25600 rows: 200 row tiles, whose partials are folded in two stages.
    {"64 <- 64, 80x80, the fold in two stages", 4, 64, 80, 80, 64},
};

std::vector<double> values(const Tensor& t) {
  const std::vector<float> f = t.to(Device::cpu()).to(kFloat32).contiguous().to_vector<float>();
  return {f.begin(), f.end()};
}

/// An image tensor's values as rows (N·H·W) × channels, the order of its channels-last bytes.
std::vector<double> rows_by_channel(const Tensor& t) {
  const std::vector<double> v = values(t);
  const std::int64_t n = t.size(0), c = t.size(1), hw = t.size(2) * t.size(3);
  std::vector<double> out(v.size());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t p = 0; p < hw; ++p)
        out[static_cast<std::size_t>((i * hw + p) * c + ch)] = v[static_cast<std::size_t>((i * c + ch) * hw + p)];
  return out;
}

class Conv1x1MaskedGradTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    if (!cutlass_products_run())
      GTEST_SKIP() << "needs the CUTLASS products: a GPU of compute capability 9.0, DPL_CUTLASS not 0";
  }

  void check(const Case& k, DType dtype) {
    SCOPED_TRACE(std::string(k.name) + " " + dtype_name(dtype));
    const std::int64_t rows = k.n * k.h * k.w;
    // Host tensors in channels-last element order (rows x channels), rounded to dtype.
    const Tensor gy = rand({k.n, k.o, k.h, k.w}).to(dtype), w = rand({k.o, k.c, 1, 1}, -0.2f, 0.2f).to(dtype);
    const Tensor y = rand({k.n, k.c, k.h, k.w}).to(dtype), x = rand({k.n, k.c, k.h, k.w}, -1.f, 3.f).to(dtype);
    const Tensor g0 = rand({k.n, k.c, k.h, k.w}).to(dtype), mean = rand({k.c});
    const std::vector<double> gyv = rows_by_channel(gy), yv = rows_by_channel(y), g0v = rows_by_channel(g0);
    const std::vector<double> wv = values(w), mv = values(mean);
    std::vector<double> want(static_cast<std::size_t>(rows * k.c)), mag(want.size());
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < k.c; ++c) {
        const auto at = static_cast<std::size_t>(r * k.c + c);
        if (!(yv[at] > 0.0)) continue;
        double s = g0v[at], m = std::fabs(g0v[at]);
        for (std::int64_t o = 0; o < k.o; ++o) {
          const double t = gyv[static_cast<std::size_t>(r * k.o + o)] * wv[static_cast<std::size_t>(o * k.c + c)];
          s += t;
          m += std::fabs(t);
        }
        want[at] = s;
        mag[at] = m;
      }
    const Tensor gyg = gy.to(gpu()).to_channels_last(), wg = w.to(gpu()).to_channels_last();
    const Tensor yg = y.to(gpu()).to_channels_last(), xg = x.to(gpu()).to_channels_last();
    Tensor g = g0.to(gpu()).to_channels_last();
    Tensor sum_g = poisoned({k.c}), sum_gx = poisoned({k.c});
    ASSERT_TRUE(conv1x1_backward_data_masked_sums(gyg, wg, Conv2dParams{}, yg, xg, mean.to(gpu()), g, sum_g, sum_gx));
    const std::vector<double> gv = rows_by_channel(g), xv = rows_by_channel(x);
    const std::vector<float> gf(gv.begin(), gv.end());
    if (dtype == kFloat32) {
      // TF32 products: each operand rounded to 10 explicit bits (2^-10 with truncation), so each
      // term may be off by 2^-9 of its magnitude; a missed or doubled term would be off by all of it.
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(gv[i], want[i], 0x1p-9 * mag[i] + 1e-6) << "gradient element " << i;
      EXPECT_LT(relative_l2(gv, want), 0x1p-10) << "gradient";
    } else {
      expect_near_exact_sum(Tensor::from_vector(gf, {rows * k.c}).to(dtype), want, mag, true, "gradient");
    }
    // The sums of the stored g, on the host.
    std::vector<double> s1(k.c), s2(k.c), m1(k.c), m2(k.c);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < k.c; ++c) {
        const auto at = static_cast<std::size_t>(r * k.c + c);
        const double gx = gv[at] * (xv[at] - mv[static_cast<std::size_t>(c)]);
        s1[c] += gv[at];
        m1[c] += std::fabs(gv[at]);
        s2[c] += gx;
        m2[c] += std::fabs(gx);
      }
    const std::vector<double> got1 = values(sum_g), got2 = values(sum_gx);
    for (std::int64_t c = 0; c < k.c; ++c) {
      EXPECT_NEAR(got1[c], s1[c], 1e-5 * m1[c] + 1e-4) << "sum of g, channel " << c;
      EXPECT_NEAR(got2[c], s2[c], 1e-5 * m2[c] + 1e-4) << "sum of g (x - mean), channel " << c;
    }
  }
};

TEST_F(Conv1x1MaskedGradTest, BFloat16MatchesTheHost) {
  for (const Case& k : kCases) check(k, kBFloat16);
}

TEST_F(Conv1x1MaskedGradTest, Float16MatchesTheHost) {
  for (const Case& k : kCases) check(k, kFloat16);
}

TEST_F(Conv1x1MaskedGradTest, Float32WithTF32MatchesTheHost) {
  const Tf32Scope tf32(true);
  for (const Case& k : kCases) check(k, kFloat32);
}

// The per-tile partials are folded in one launch on the compute stream (the last blocks to finish
// add the fold's rows, then zero their counters for the next fold) and in two launches on a side
// stream, where those counters may not be used. Same additions in the same order: the gradient and
// the sums must agree to the bit between runs and between the two folds.
TEST_F(Conv1x1MaskedGradTest, TheSumsAreTheSameInEveryRunAndEitherFold) {
  const Case& k = kCases.back();  // 200 row tiles: the fold in two stages
  const Tensor gy = rand({k.n, k.o, k.h, k.w}).to(kBFloat16).to(gpu()).to_channels_last();
  const Tensor w = rand({k.o, k.c, 1, 1}, -0.2f, 0.2f).to(kBFloat16).to(gpu()).to_channels_last();
  const Tensor y = rand({k.n, k.c, k.h, k.w}).to(kBFloat16).to(gpu()).to_channels_last();
  const Tensor x = rand({k.n, k.c, k.h, k.w}, -1.f, 3.f).to(kBFloat16).to(gpu()).to_channels_last();
  const Tensor g0 = rand({k.n, k.c, k.h, k.w}).to(kBFloat16), mean = rand({k.c}).to(gpu());
  // g, then the two sums, as floats.
  const auto run = [&] {
    Tensor g = g0.to(gpu()).to_channels_last();
    Tensor sum_g = poisoned({k.c}), sum_gx = poisoned({k.c});
    EXPECT_TRUE(conv1x1_backward_data_masked_sums(gy, w, Conv2dParams{}, y, x, mean, g, sum_g, sum_gx));
    std::vector<float> out = g.to(Device::cpu()).to(kFloat32).to_vector<float>();
    for (const Tensor* s : {&sum_g, &sum_gx}) {
      const std::vector<float> v = s->to(Device::cpu()).to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  };
  const std::vector<float> first = run(), second = run();
  EXPECT_EQ(first, second) << "two runs on the compute stream";
  backend::SideLane lane(0);
  lane.prepare(1);
  lane.mark_ready(0);
  std::vector<float> routed;
  {
    backend::SideLane::Scope scope(lane);
    lane.begin_item(0);
    routed = run();
    lane.end_item(0);
    lane.mark_backward_end();
    lane.join();
  }
  EXPECT_EQ(first, routed) << "the fold in one launch against the fold in two (a side stream)";
}

TEST_F(Conv1x1MaskedGradTest, Float32WithoutTF32IsLeftToCuDNN) {
  // Without TF32 the product would not multiply float32 as cuDNN does: it declines, writing nothing.
  const Tf32Scope tf32(false);
  const Case& k = kCases.front();
  const TensorOptions on_gpu(kFloat32, gpu());
  const Tensor gy = Tensor::ones({k.n, k.o, k.h, k.w}, on_gpu).to_channels_last();
  const Tensor w = Tensor::ones({k.o, k.c, 1, 1}, on_gpu).to_channels_last();
  const Tensor y = Tensor::ones({k.n, k.c, k.h, k.w}, on_gpu).to_channels_last();
  Tensor g = Tensor::zeros({k.n, k.c, k.h, k.w}, on_gpu).to_channels_last();
  Tensor sum_g = poisoned({k.c}), sum_gx = poisoned({k.c});
  EXPECT_FALSE(conv1x1_backward_data_masked_sums(gy, w, Conv2dParams{}, y, y, Tensor::zeros({k.c}, on_gpu), g, sum_g,
                                                 sum_gx));
  EXPECT_EQ(g.to(Device::cpu()).to_vector<float>(), std::vector<float>(static_cast<std::size_t>(g.numel()), 0.f));
}

#else

TEST(Conv1x1MaskedGradTest, NeedsABuildWithCutlass) {
  GTEST_SKIP() << "built without CUTLASS's sm_90 products (DPL_WITH_CUTLASS_SM90 is 0)";
}

#endif

}  // namespace
}  // namespace dpl::test
