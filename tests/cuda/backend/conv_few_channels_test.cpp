// The tensor-core kernels for convolutions with few input channels
// (src/backend/cuda/conv_few_channels.hpp) against a float64 reference computed on the host from
// the same inputs: forward and weight gradient (fresh and accumulated), bfloat16, float16 and
// float32 (as TF32), for the ResNet stem and geometries that reach the kernels' edges (1 and 4 channels,
// odd and rectangular images and windows, unequal strides and paddings, output channels split
// over several blocks, weight columns over several blocks, blocks that loop over many tiles).
//
// Tolerances. Both sides start from the same 16-bit values, whose products are exact in float32;
// the kernels add them in float32 and round once to 16 bits. So each result may differ from the
// exact sum by the final rounding, u|want| with u = 2^-8 (bfloat16) or 2^-11 (float16), plus the
// float32 additions' error, at most about (terms * 2^-24) times the sum of the terms' magnitudes;
// the element-wise bound allows 2^-14 times that sum, covering the forward's up to 196 terms and,
// for the weight gradient's thousands of terms, the error of a sum in a few hundred parts. The
// weight gradient's rounding errors are also held as a whole: the relative L2 error must stay
// below 2u, which a missed or doubled tile (an error of whole terms) would not.
//
// Float32 multiplies as TF32: the kernels round each operand to TF32 (to nearest, u = 2^-11), so
// each term may be off by about 2u of its magnitude, and a result by 2u times the sum of its
// terms' magnitudes plus the float32 additions' error; the element-wise bound allows 4u of that
// sum, and the relative L2 error must stay below 4u (a missed term would cost several percent).
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/conv_few_channels.hpp"
#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

using backend::Conv2dParams;
using backend::cuda_detail::conv_few_channels_backward_weight;
using backend::cuda_detail::conv_few_channels_fits;
using backend::cuda_detail::conv_few_channels_forward;

struct Case {
  const char* name;
  std::int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw;
  std::int64_t oh() const { return (h + 2 * ph - kh) / sh + 1; }
  std::int64_t ow() const { return (w + 2 * pw - kw) / sw + 1; }
  Conv2dParams params() const {
    Conv2dParams p;
    p.stride[0] = sh;
    p.stride[1] = sw;
    p.padding[0] = ph;
    p.padding[1] = pw;
    return p;
  }
};

const std::vector<Case> kCases = {
    {"stem 7x7 stride 2, 3 -> 64", 2, 3, 60, 52, 64, 7, 7, 2, 2, 3, 3},
    {"one channel 3x3, odd image, 8 out", 2, 1, 17, 13, 8, 3, 3, 1, 1, 1, 1},
    {"4 channels 5x5 stride 2 unpadded, 128 out", 1, 4, 23, 19, 128, 5, 5, 2, 2, 0, 0},
    {"2 channels 3x5, strides (2, 1), paddings (1, 2), 16 out", 2, 2, 21, 30, 16, 3, 5, 2, 1, 1, 2},
    {"1x1, 24 out", 3, 3, 9, 11, 24, 1, 1, 1, 1, 0, 0},
    {"stem window, 32 out", 1, 3, 37, 41, 32, 7, 7, 2, 2, 3, 3},
    {"11x11 with 4 channels (484 weight columns)", 1, 4, 20, 18, 8, 11, 11, 1, 1, 5, 5},
    {"3x3, 64 out, many tiles per block", 4, 3, 150, 150, 64, 3, 3, 1, 1, 1, 1},
};

constexpr double kTf32Unit = 1.0 / 2048;

/// got within 4 * kTf32Unit of each result's terms' magnitudes (mag) of the exact want, and within
/// 4 * kTf32Unit of it in relative L2 error.
void expect_near_tf32_sum(const Tensor& got, const std::vector<double>& want, const std::vector<double>& mag,
                          const std::string& what) {
  std::vector<double> extra(mag.size());
  for (std::size_t i = 0; i < mag.size(); ++i) extra[i] = 4 * kTf32Unit * mag[i];
  const std::vector<float> want_f(want.begin(), want.end());
  expect_close_with(got.to(Device::cpu()), Tensor::from_vector(want_f, got.shape()), 0.f, 1e-6f, extra, what);
  const std::vector<float> f = got.to_vector<float>();
  EXPECT_LE(relative_l2(std::vector<double>(f.begin(), f.end()), want), 4 * kTf32Unit) << what << ": relative L2 error";
}

/// t (logical (N, C, H, W) or (O, C, KH, KW)) on the GPU in channels-last strides.
Tensor channels_last_on_gpu(const Tensor& t) { return t.to(gpu()).to_channels_last(); }

/// A GPU tensor of shape s and dtype t in channels-last strides, every element NaN.
Tensor poisoned_channels_last(const Shape& s, DType t) { return poisoned(s).to(t).to_channels_last(); }

std::vector<double> values(const Tensor& t) {
  const std::vector<float> f = t.to(kFloat32).to_vector<float>();
  return {f.begin(), f.end()};
}

/// The exact convolution (y) and, per output, the sum of its terms' magnitudes (mag), of x
/// (N, C, H, W) and w (O, C, KH, KW) in logical order.
void reference_forward(const Case& k, const std::vector<double>& x, const std::vector<double>& w,
                       std::vector<double>& y, std::vector<double>& mag) {
  const std::int64_t oh = k.oh(), ow = k.ow();
  y.assign(static_cast<std::size_t>(k.n * k.o * oh * ow), 0.0);
  mag = y;
  for (std::int64_t n = 0; n < k.n; ++n)
    for (std::int64_t o = 0; o < k.o; ++o)
      for (std::int64_t oy = 0; oy < oh; ++oy)
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          double s = 0.0, m = 0.0;
          for (std::int64_t c = 0; c < k.c; ++c)
            for (std::int64_t i = 0; i < k.kh; ++i)
              for (std::int64_t j = 0; j < k.kw; ++j) {
                const std::int64_t iy = oy * k.sh - k.ph + i, ix = ox * k.sw - k.pw + j;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                const double t = x[static_cast<std::size_t>(((n * k.c + c) * k.h + iy) * k.w + ix)] *
                                 w[static_cast<std::size_t>(((o * k.c + c) * k.kh + i) * k.kw + j)];
                s += t;
                m += std::fabs(t);
              }
          const auto at = static_cast<std::size_t>(((n * k.o + o) * oh + oy) * ow + ox);
          y[at] = s;
          mag[at] = m;
        }
}

/// The exact weight gradient (gw, logical (O, C, KH, KW)) of x and gy (N, O, OH, OW), and per
/// element the sum of its terms' magnitudes.
void reference_backward_weight(const Case& k, const std::vector<double>& x, const std::vector<double>& gy,
                               std::vector<double>& gw, std::vector<double>& mag) {
  const std::int64_t oh = k.oh(), ow = k.ow();
  gw.assign(static_cast<std::size_t>(k.o * k.c * k.kh * k.kw), 0.0);
  mag = gw;
  for (std::int64_t n = 0; n < k.n; ++n)
    for (std::int64_t o = 0; o < k.o; ++o)
      for (std::int64_t oy = 0; oy < oh; ++oy)
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          const double g = gy[static_cast<std::size_t>(((n * k.o + o) * oh + oy) * ow + ox)];
          for (std::int64_t c = 0; c < k.c; ++c)
            for (std::int64_t i = 0; i < k.kh; ++i)
              for (std::int64_t j = 0; j < k.kw; ++j) {
                const std::int64_t iy = oy * k.sh - k.ph + i, ix = ox * k.sw - k.pw + j;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                const double t = g * x[static_cast<std::size_t>(((n * k.c + c) * k.h + iy) * k.w + ix)];
                const auto at = static_cast<std::size_t>(((o * k.c + c) * k.kh + i) * k.kw + j);
                gw[at] += t;
                mag[at] += std::fabs(t);
              }
        }
}

class ConvFewChannelsTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess || major < 8)
      GTEST_SKIP() << "the kernels need compute capability 8.0 or newer";
  }

  // x, w and gy drawn in [-1, 1) and rounded to dtype, as logical (contiguous) host tensors.
  void check(const Case& k, DType dtype) {
    const auto expect_near = [&](const Tensor& got, const std::vector<double>& want, const std::vector<double>& mag,
                                 bool l2, const std::string& what) {
      if (dtype == kFloat32) expect_near_tf32_sum(got, want, mag, what);
      else expect_near_exact_sum(got, want, mag, l2, what);
    };
    SCOPED_TRACE(std::string(k.name) + " " + dtype_name(dtype));
    const Conv2dParams p = k.params();
    const Tensor x = rand({k.n, k.c, k.h, k.w}).to(dtype), w = rand({k.o, k.c, k.kh, k.kw}).to(dtype);
    const Tensor gy = rand({k.n, k.o, k.oh(), k.ow()}).to(dtype);
    const Tensor xg = channels_last_on_gpu(x), wg = channels_last_on_gpu(w), gyg = channels_last_on_gpu(gy);
    ASSERT_TRUE(conv_few_channels_fits(xg, wg, p));

    std::vector<double> want, mag;
    reference_forward(k, values(x), values(w), want, mag);
    Tensor y = poisoned_channels_last({k.n, k.o, k.oh(), k.ow()}, dtype);
    conv_few_channels_forward(xg, wg, p, y);
    expect_near(y, want, mag, false, "forward");

    reference_backward_weight(k, values(x), values(gy), want, mag);
    Tensor gw = poisoned_channels_last(w.shape(), dtype);
    conv_few_channels_backward_weight(xg, gyg, p, 0.f, gw);
    expect_near(gw, want, mag, true, "weight gradient (fresh)");
    // The sums are split over blocks and added up in a fixed order: a second run gives the same bits.
    Tensor again = poisoned_channels_last(w.shape(), dtype);
    conv_few_channels_backward_weight(xg, gyg, p, 0.f, again);
    expect_equal<float>(again.to(kFloat32), gw.to(kFloat32), "weight gradient run twice");

    const Tensor prior = rand(w.shape()).to(dtype);
    const std::vector<double> before = values(prior);
    for (std::size_t i = 0; i < want.size(); ++i) {
      want[i] += before[i];
      mag[i] += std::fabs(before[i]);
    }
    Tensor acc = channels_last_on_gpu(prior);
    conv_few_channels_backward_weight(xg, gyg, p, 1.f, acc);
    expect_near(acc, want, mag, true, "weight gradient (accumulated)");
  }
};

TEST_F(ConvFewChannelsTest, BFloat16MatchesTheExactConvolution) {
  for (const Case& k : kCases) check(k, kBFloat16);
}

TEST_F(ConvFewChannelsTest, Float16MatchesTheExactConvolution) {
  for (const Case& k : kCases) check(k, kFloat16);
}

TEST_F(ConvFewChannelsTest, Float32MatchesTheExactConvolutionToTf32) {
  for (const Case& k : kCases) check(k, kFloat32);
}

TEST_F(ConvFewChannelsTest, TakesOnlyWhatTheKernelsHandle) {
  const auto fits = [](const Shape& xs, const Shape& ws, DType t, const Conv2dParams& p, bool channels_last = true) {
    const Tensor x = Tensor::zeros(xs, TensorOptions(t, gpu())), w = Tensor::zeros(ws, TensorOptions(t, gpu()));
    return channels_last ? conv_few_channels_fits(x.to_channels_last(), w.to_channels_last(), p)
                         : conv_few_channels_fits(x, w, p);
  };
  Conv2dParams stem;
  stem.stride[0] = stem.stride[1] = 2;
  stem.padding[0] = stem.padding[1] = 3;
  EXPECT_TRUE(fits({2, 3, 32, 32}, {64, 3, 7, 7}, kBFloat16, stem));
  EXPECT_TRUE(fits({2, 3, 32, 32}, {64, 3, 7, 7}, kFloat16, stem));
  EXPECT_TRUE(fits({2, 3, 32, 32}, {64, 3, 7, 7}, kFloat32, stem)) << "float32";
  EXPECT_FALSE(fits({2, 3, 32, 32}, {64, 3, 7, 7}, kFloat32, stem, false)) << "float32 in NCHW strides";
  const Tensor x32 = Tensor::zeros({2, 3, 32, 32}, TensorOptions(kFloat32, gpu())).to_channels_last();
  const Tensor w16 = Tensor::zeros({64, 3, 7, 7}, TensorOptions(kBFloat16, gpu())).to_channels_last();
  EXPECT_FALSE(conv_few_channels_fits(x32, w16, stem)) << "mixed dtypes";
  EXPECT_FALSE(fits({2, 3, 32, 32}, {64, 3, 7, 7}, kBFloat16, stem, false)) << "NCHW strides";
  EXPECT_FALSE(fits({2, 5, 32, 32}, {64, 5, 7, 7}, kBFloat16, stem)) << "5 channels";
  EXPECT_FALSE(fits({2, 3, 32, 32}, {12, 3, 7, 7}, kBFloat16, stem)) << "12 output channels";
  Conv2dParams grouped = stem;
  grouped.groups = 3;
  EXPECT_FALSE(fits({2, 3, 32, 32}, {63, 1, 7, 7}, kBFloat16, grouped)) << "groups";
  Conv2dParams dilated = stem;
  dilated.dilation[0] = 2;
  EXPECT_FALSE(fits({2, 3, 32, 32}, {64, 3, 7, 7}, kBFloat16, dilated)) << "dilation";
  Conv2dParams wide;
  wide.stride[0] = wide.stride[1] = 4;
  EXPECT_FALSE(fits({2, 3, 96, 96}, {64, 3, 11, 11}, kBFloat16, wide)) << "a patch of 71x71 pixels";
}

// Through the registered kernels, where DPL_CUDNN_BENCHMARK decides per shape between cuDNN and
// the kernels above by timing them: whichever runs, the result is the convolution's, and the
// accumulated gradient is added once (the timing runs write elsewhere). cuDNN adds in an order and
// precision of its own, so the bound is the relative L2 error, at 2^-5 (bfloat16) or 2^-8
// (float16) as the convolution tests allow cuDNN, and for float32 with TF32 on (either side's
// products rounded to TF32) at 2^-9, four times TF32's rounding unit.
TEST_F(ConvFewChannelsTest, DispatchedStemMatchesTheExactConvolution) {
  const Case k = kCases[0];
  const Conv2dParams p = k.params();
  const Tf32Scope tf32(true);  // float32 may then run on the TF32 kernels
  for (DType dtype : {kBFloat16, kFloat16, kFloat32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = rand({k.n, k.c, k.h, k.w}).to(dtype), w = rand({k.o, k.c, k.kh, k.kw}).to(dtype);
    const Tensor gy = rand({k.n, k.o, k.oh(), k.ow()}).to(dtype), prior = rand(w.shape()).to(dtype);
    const Tensor xg = channels_last_on_gpu(x), wg = channels_last_on_gpu(w), gyg = channels_last_on_gpu(gy);
    const double bound = dtype == kBFloat16 ? 1.0 / 32 : dtype == kFloat16 ? 1.0 / 256 : 1.0 / 512;
    std::vector<double> want_y, want_gw, mag;
    reference_forward(k, values(x), values(w), want_y, mag);
    reference_backward_weight(k, values(x), values(gy), want_gw, mag);
    const std::vector<double> before = values(prior);
    for (std::size_t i = 0; i < want_gw.size(); ++i) want_gw[i] += before[i];
    // Twice: the first call of a shape chooses, the second runs the choice.
    for (int call = 0; call < 2; ++call) {
      Tensor y = poisoned_channels_last({k.n, k.o, k.oh(), k.ow()}, dtype);
      backend::conv2d_forward(xg, wg, nullptr, p, y);
      EXPECT_LE(relative_l2(values(y), want_y), bound) << "forward, call " << call;
      Tensor gw = channels_last_on_gpu(prior);
      backend::conv2d_backward_weight(xg, gyg, p, 1.f, gw);
      EXPECT_LE(relative_l2(values(gw), want_gw), bound) << "accumulated weight gradient, call " << call;
    }
  }
}

}  // namespace
}  // namespace dpl::test
