// CPU-vs-CUDA agreement of conv2d and conv_transpose2d (oneDNN against cuDNN, on the same three
// convolution kernels): forward, the input, weight and bias gradients, written fresh and
// accumulated, in NCHW and channels-last, for float32 (TF32 off), bfloat16 and float16.
//
// Tolerances: float32 rtol 1e-4 / atol 1e-4 (sums of up to 36 products per output in a different
// order); 16-bit: both sides compute in float32 from the same 16-bit inputs, the CPU rounds once
// and the GPU twice for a biased output (the convolution's result, then the bias add), so they
// differ by up to two units in the last place: rtol 2^-6 (bfloat16) or 2^-9 (float16), with
// atol 1e-2 for values near zero.
// conv_transpose2d's bias is a separate broadcast add on both devices, so the same bound holds.
//
// Pooling (image_agreement.hpp): in float32 exact up to the order of an average's sum (1e-6).
// dropout2d: the same mask on both devices, so products of the same two numbers, each rounded once.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "image_agreement.hpp"

namespace dpl::test {
namespace {

struct Geometry {
  const char* name;
  Shape x, w;
  Conv2dPair stride, padding, dilation;
  std::int64_t groups;
};

const std::vector<Geometry> kGeometries = {
    {"3x3 padded", {2, 4, 9, 8}, {8, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    {"strided", {2, 3, 11, 10}, {5, 3, 3, 2}, {2, 3}, {1, 0}, {1, 1}, 1},
    {"dilated", {1, 4, 9, 9}, {4, 4, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 1},
    {"grouped", {2, 8, 7, 7}, {8, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2},
    {"depthwise", {2, 6, 8, 8}, {6, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 6},
    {"pointwise", {4, 16, 5, 5}, {12, 16, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
    // An RGB stem: three channels, a 7x7 window, stride 2.
    {"stem 7x7", {2, 3, 20, 18}, {8, 3, 7, 7}, {2, 2}, {3, 3}, {1, 1}, 1},
};

class ConvTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    tf32_was_ = cuda::allow_tf32();
    cuda::set_allow_tf32(false);
  }
  void TearDown() override {
    if (!IsSkipped()) cuda::set_allow_tf32(tf32_was_);
    CudaTest::TearDown();
  }

  Tensor input(const Shape& s, DType dtype, bool nhwc) {
    Tensor t = rand(s).to(dtype);
    return nhwc && s.size() == 4 ? t.to_channels_last() : t;
  }
  static Tensor to_gpu(const Tensor& t) {
    const Tensor g = t.to(gpu());
    return t.memory_format() == MemoryFormat::kChannelsLast ? g.to_channels_last() : g;
  }
  // prior: for a gradient accumulated onto a prior one, that prior (see expect_close_accumulated).
  static void close(const Tensor& got, const Tensor& want, DType dtype, const std::string& what,
                    const Tensor& prior = Tensor()) {
    const float rtol = dtype == kFloat32 ? 1e-4f : dtype == kBFloat16 ? 1.f / 64 : 1.f / 512;
    float atol = dtype == kFloat32 ? 1e-4f : 1e-2f;
    // cuDNN's 16-bit algorithms add their products in an order and precision of their own, so a
    // result that is a small difference of large terms is off by a rounding at the terms' scale:
    // measured on an H200 up to about 1.5% of the tensor's largest value for bfloat16 gradients.
    // The 16-bit tolerance therefore also allows 2^-5 (bfloat16) or 2^-8 (float16) of that largest
    // value; float32 stays tight (TF32 off).
    if (dtype != kFloat32) {
      float largest = 0.f;
      for (float v : want.to(kFloat32).to_vector<float>()) largest = std::max(largest, std::fabs(v));
      atol = std::max(atol, largest * (dtype == kBFloat16 ? 1.f / 32 : 1.f / 256));
    }
    if (prior.defined()) return expect_close_accumulated(got, want.to(got.dtype()), prior, rtol, atol, what);
    expect_close(got.to(kFloat32), want.to(kFloat32), rtol, atol, what);
  }

  void check(const Geometry& g, DType dtype, bool nhwc) {
    check_op(g.name, g.x, g.w, g.w[0], dtype, nhwc, [&g](const Variable& x, const Variable& w, const Variable& b) {
      return conv2d(x, w, b, g.stride, g.padding, g.dilation, g.groups);
    });
  }

  // op(x, w, b) of x (shape xs), weight (ws) and bias (bias_size,) on both devices.
  template <typename Op>
  void check_op(const std::string& name, const Shape& xs, const Shape& ws, std::int64_t bias_size, DType dtype,
                bool nhwc, const Op& op) {
    SCOPED_TRACE(name + " " + dtype_name(dtype) + (nhwc ? " channels-last" : " nchw"));
    const Tensor x = input(xs, dtype, nhwc), w = input(ws, dtype, nhwc), b = input({bias_size}, dtype, false);
    for (bool accumulate : {false, true}) {
      Variable xc(x.clone(), true), wc(w.clone(), true), bc(b.clone(), true);
      Variable xg(to_gpu(x), true), wg(to_gpu(w), true), bg(to_gpu(b), true);
      Tensor prior[3];  // the gradients accumulated onto, kept apart from the buffers backward adds into
      if (accumulate) {
        int k = 0;
        for (Variable* v : {&xc, &wc, &bc}) {
          prior[k] = rand(v->shape()).to(dtype);
          v->set_grad(prior[k].clone());
          (v == &xc ? xg : v == &wc ? wg : bg).set_grad(prior[k].to(gpu()));
          ++k;
        }
      }
      const Variable yc = op(xc, wc, bc), yg = op(xg, wg, bg);
      // The output keeps the input's memory format (x.clone() on the host is contiguous, so the
      // GPU result's format is compared with the format asked for).
      EXPECT_TRUE(nhwc ? yg.data().is_channels_last() : yg.data().is_contiguous());
      close(yg.data().to(Device::cpu()), yc.data(), dtype, "output");
      const Tensor weights = rand(yc.shape()).to(dtype);
      sum(mul(yc, Variable(weights))).backward();
      sum(mul(yg, Variable(weights.to(gpu())))).backward();
      const std::string mode = accumulate ? " (accumulated)" : " (fresh)";
      close(xg.grad().to(Device::cpu()), xc.grad(), dtype, "input gradient" + mode, prior[0]);
      close(wg.grad().to(Device::cpu()), wc.grad(), dtype, "weight gradient" + mode, prior[1]);
      close(bg.grad().to(Device::cpu()), bc.grad(), dtype, "bias gradient" + mode, prior[2]);
    }
  }

 private:
  bool tf32_was_ = false;
};

TEST_F(ConvTest, Float32AgreesWithTheCpu) {
  DPL_SKIP_WITHOUT_CPU_REFERENCE();
  for (const auto& g : kGeometries)
    for (bool nhwc : {false, true}) check(g, kFloat32, nhwc);
}

TEST_F(ConvTest, BFloat16AgreesWithTheCpu) {
  DPL_SKIP_WITHOUT_CPU_REFERENCE();
  for (const auto& g : kGeometries)
    for (bool nhwc : {false, true}) check(g, kBFloat16, nhwc);
}

TEST_F(ConvTest, Float16AgreesWithTheCpu) {
  DPL_SKIP_WITHOUT_CPU_REFERENCE();
  for (const auto& g : kGeometries)
    for (bool nhwc : {false, true}) check(g, kFloat16, nhwc);
}

// conv_transpose2d's geometries: weight (in, out/groups, kh, kw); output_padding below the stride.
struct TransposedGeometry {
  const char* name;
  Shape x, w;
  Conv2dPair stride, padding, output_padding, dilation;
  std::int64_t groups;
};

const std::vector<TransposedGeometry> kTransposedGeometries = {
    {"transposed 3x3", {2, 4, 6, 5}, {4, 6, 3, 3}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
    {"transposed upsampling", {2, 8, 5, 6}, {8, 4, 4, 4}, {2, 2}, {1, 1}, {0, 0}, {1, 1}, 1},
    {"transposed output_padding", {1, 3, 5, 4}, {3, 5, 3, 2}, {2, 3}, {1, 0}, {1, 2}, {1, 1}, 1},
    {"transposed dilated", {1, 4, 5, 5}, {4, 4, 3, 3}, {1, 1}, {2, 2}, {0, 0}, {2, 2}, 1},
    {"transposed grouped", {2, 8, 4, 4}, {8, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 2},
};

TEST_F(ConvTest, TransposedAgreesWithTheCpuInEveryDtype) {
  DPL_SKIP_WITHOUT_CPU_REFERENCE();
  for (DType t : {kFloat32, kBFloat16, kFloat16})
    for (const auto& g : kTransposedGeometries)
      for (bool nhwc : {false, true})
        check_op(g.name, g.x, g.w, g.w[1] * g.groups, t, nhwc,
                 [&g](const Variable& x, const Variable& w, const Variable& b) {
                   return conv_transpose2d(x, w, b, g.stride, g.padding, g.output_padding, g.groups, g.dilation);
                 });
}

// A second call of a shape reuses the algorithm the first one chose (forward algorithms are
// deterministic), so it gives the same bits.
TEST_F(ConvTest, RepeatedCallsReuseTheChosenAlgorithm) {
  const Geometry& g = kGeometries[0];
  const Tensor x = to_gpu(input(g.x, kFloat32, false)), w = to_gpu(input(g.w, kFloat32, false));
  const Tensor y1 = conv2d(Variable(x), Variable(w), Variable(), g.stride, g.padding).data();
  const Tensor y2 = conv2d(Variable(x), Variable(w), Variable(), g.stride, g.padding).data();
  expect_equal<float>(y2, y1, "second call");
}

TEST_F(NormPoolTest, PoolingAgreesInEveryFormatAndDtype) {
  DPL_SKIP_WITHOUT_CPU_REFERENCE();
  for (DType t : {kFloat32, kBFloat16, kFloat16})
    for (bool nhwc : {false, true}) {
      check("max_pool2d", {2, 5, 9, 8}, t, nhwc, [](const Variable& x) { return max_pool2d(x, 3, 2, 1); },
            rtol_of(t, 1e-6f), operand_atol(t, 1e-6f), /*without_ties=*/true);
      // 16 channels: the channels-last max pooling kernels' vector path (4 or 8 channels a thread).
      check("max_pool2d, 16 channels", {1, 16, 6, 7}, t, nhwc, [](const Variable& x) { return max_pool2d(x, 3, 2, 1); },
            rtol_of(t, 1e-6f), operand_atol(t, 1e-6f), /*without_ties=*/true);
      check("max_pool2d 2x3", {1, 16, 6, 7}, t, nhwc,
            [](const Variable& x) { return max_pool2d(x, Size2d(2, 3), Size2d(1, 2), Size2d(1, 1)); },
            rtol_of(t, 1e-6f), operand_atol(t, 1e-6f), /*without_ties=*/true);
      // Windows larger than 3 x 3, and pixels held by more than 2 x 2 windows: the channels-last
      // kernels' general paths beside the ones specialised for ResNet's 3 x 3, stride-2 pooling.
      check("max_pool2d 5x3 stride 1", {1, 16, 7, 6}, t, nhwc,
            [](const Variable& x) { return max_pool2d(x, Size2d(5, 3), Size2d(1, 1), Size2d(2, 1)); },
            rtol_of(t, 1e-6f), operand_atol(t, 1e-6f), /*without_ties=*/true);
      check("avg_pool2d", {2, 5, 9, 8}, t, nhwc, [](const Variable& x) { return avg_pool2d(x, 3, 2, 1); },
            rtol_of(t, 1e-6f), 1e-6f);
      check("avg_pool2d exclude pad", {2, 5, 9, 8}, t, nhwc,
            [](const Variable& x) { return avg_pool2d(x, Size2d(2, 3), 1, Size2d(1, 1), false); }, rtol_of(t, 1e-6f),
            1e-6f);
      check("global_avg_pool2d", {3, 4, 7, 5}, t, nhwc, [](const Variable& x) { return global_avg_pool2d(x); },
            rtol_of(t, 1e-6f), 1e-6f);
    }
}

TEST_F(NormPoolTest, Dropout2dDrawsTheSameChannelMaskOnBothDevices) {
  for (DType t : {kFloat32, kBFloat16, kFloat16})
    for (bool nhwc : {false, true})
      check("dropout2d", {4, 16, 5, 6}, t, nhwc, [](const Variable& x) {
        Generator g(21);  // one state per call: both devices see the same seed
        return dropout2d(x, 0.4f, g);
      }, rtol_of(t, 1e-6f), 1e-6f);
}

// A window holding a NaN pools to NaN (the channels-last kernels let a NaN win), so that a
// diverging run shows in the loss instead of being hidden by the pooling.
TEST_F(NormPoolTest, ChannelsLastMaxPoolingPassesNaNOn) {
  std::vector<float> v(1 * 8 * 4 * 4, 1.f);
  v[0] = std::nanf("");  // channel 0, pixel (0, 0): inside the first output pixel's window only
  const Tensor x = channels_last(on_gpu(Tensor::from_vector(v, {1, 8, 4, 4})));
  const std::vector<float> y = max_pool2d(Variable(x), 2, 2, 0).data().to(Device::cpu()).to_vector<float>();
  ASSERT_EQ(y.size(), 8u * 2 * 2);
  EXPECT_TRUE(std::isnan(y[0]));  // (c 0, 0, 0) in logical NCHW order
  for (std::size_t i = 1; i < y.size(); ++i) EXPECT_EQ(y[i], 1.f) << "element " << i;
}

// Channels-last max pooling keeps only its winners' indices: an intermediate it pools is freed
// once no handle holds it, and backward still routes every gradient to its window's maximum.
TEST_F(NormPoolTest, ChannelsLastMaxPoolingKeepsNoCopyOfItsInput) {
  DPL_SKIP_WITHOUT_CPU_REFERENCE();
  const Tensor base = distinct_values({1, 16, 6, 7}, rand({1, 16, 6, 7}));
  Variable xc(channels_last(base), true), xg(channels_last(on_gpu(base)), true);
  std::weak_ptr<Storage> h_storage;
  Variable loss;
  {
    const Variable h = add(xg, xg);
    h_storage = h.data().storage();
    loss = sum(max_pool2d(h, 3, 2, 1));
  }
  EXPECT_TRUE(h_storage.expired());
  loss.backward();
  sum(max_pool2d(add(xc, xc), 3, 2, 1)).backward();
  expect_close(xg.grad().to(Device::cpu()), xc.grad(), 0.f, 0.f, "gradient");
}

}  // namespace
}  // namespace dpl::test
