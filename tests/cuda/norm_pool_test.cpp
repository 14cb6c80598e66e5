// CPU-vs-CUDA agreement of batch normalisation and pooling (oneDNN against cuDNN and dpl's
// channels-last batch-norm kernels): forward values,
// running statistics and gradients, in NCHW and channels-last memory, float32 and 16-bit, and the
// fused BN+ReLU / BN+add+ReLU path (dpl's channels-last kernels, every dtype) against the
// CPU's composition of the plain ops.
//
// Tolerances: pooling in float32 is exact up to the order of an average's sum (1e-6); batch norm
// reduces in a different order on each device (rtol/atol 1e-4 for values, 1e-3 for gradients,
// which sum products over the batch). 16-bit outputs are float32 results rounded once on each
// device, so two results one rounding apart differ by at most two units in the last place:
// rtol 2^-7 for bfloat16, 2^-10 for float16, on top of the float32 tolerance (gradients
// accumulated onto a prior one: see expect_close_accumulated; sums of several rounded terms: see
// operand_atol).
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <vector>

#include "cuda_test_util.hpp"
#include "dpl/tensor/storage.hpp"

namespace dpl::test {
namespace {

// t's values in channels-last memory on t's device.
Tensor channels_last(const Tensor& t) {
  const std::int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  Tensor out(Storage::allocate(t.nbytes(), t.device()), 0, t.shape(), {h * w * c, 1, w * c, c}, t.dtype());
  out.copy_(t);
  return out;
}

// Max pooling's gradient goes to the largest element of each window; when two elements of a
// window tie (likely once random values are rounded to 16 bits), the devices may pick different
// ones. This input has no ties at all: distinct magnitudes m/128 * 2^-e (m in [128, 256), e in
// [0, 6)), exact in bfloat16 and float16, in a random order with random signs.
Tensor distinct_values(const Shape& shape, const Tensor& keys) {
  std::vector<float> magnitudes;
  for (int e = 0; e < 6; ++e)
    for (int m = 128; m < 256; ++m) magnitudes.push_back(static_cast<float>(m) / 128.f / static_cast<float>(1 << e));
  const std::vector<float> k = keys.to_vector<float>();
  DPL_CHECK(k.size() <= magnitudes.size(), "distinct_values: at most ", magnitudes.size(), " elements");
  std::vector<std::size_t> order(k.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return k[a] < k[b]; });
  std::vector<float> v(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) v[order[i]] = (k[i] < 0.f ? -1.f : 1.f) * magnitudes[i];
  return Tensor::from_vector(v, shape);
}

float rtol_of(DType t, float base) {
  return t == kBFloat16 ? base + 1.f / 128 : t == kFloat16 ? base + 1.f / 1024 : base;
}

// An absolute tolerance at the operands' scale (values up to about 2) for 16-bit results that
// sum or compose several rounded terms: max pooling's gradient adds the output gradients of
// overlapping windows (one device may round between the adds), and the composed BN+add+ReLU
// rounds the normalised value before adding the residual, where the fused kernel rounds once.
// Cancellation can leave a small result carrying an error of the operands' size.
float operand_atol(DType t, float base) { return t == kFloat32 ? base : 2.f * rtol_of(t, 0.f); }

class NormPoolTest : public CudaTest {
 protected:
  using Op = std::function<Variable(const Variable&)>;

  // Runs op on the same input on both devices (rounded to dtype first, in the given format),
  // compares the outputs and the input gradients of sum(y * w), fresh and accumulated.
  // With float32_reference, the CPU computes in float32 from the same rounded inputs: the
  // reference for a fused 16-bit kernel, which rounds once where the CPU's composition of 16-bit
  // ops rounds at every op (and near ReLU's kink can even route a gradient differently).
  void check(const std::string& name, const Shape& shape, DType dtype, bool nhwc, const Op& op, float rtol,
             float atol, bool without_ties = false, bool float32_reference = false) {
    SCOPED_TRACE(name + " " + dtype_name(dtype) + (nhwc ? " channels-last" : " NCHW"));
    auto cpu_side = [&](const Tensor& t) { return float32_reference ? t.to(kFloat32) : t; };
    const Tensor base = (without_ties ? distinct_values(shape, rand(shape)) : rand(shape, -2.f, 2.f)).to(dtype);
    const Tensor xc = cpu_side(nhwc ? channels_last(base) : base);
    const Tensor xg = nhwc ? channels_last(on_gpu(base)) : on_gpu(base);
    for (bool accumulate : {false, true}) {
      Variable vc(xc, true), vg(xg, true);
      Tensor prior;  // the gradient accumulated onto, kept apart from the buffers backward adds into
      if (accumulate) {
        prior = rand(shape).to(dtype);
        vc.set_grad(cpu_side(prior).clone());
        vg.set_grad(on_gpu(prior));
      }
      const Variable yc = op(vc), yg = op(vg);
      expect_close(yg.data().to(Device::cpu()).to(kFloat32), yc.data().to(kFloat32), rtol, atol, "forward");
      const Tensor w = rand(yc.shape()).to(dtype);
      sum(mul(yc, Variable(cpu_side(w)))).backward();
      sum(mul(yg, Variable(on_gpu(w)))).backward();
      const Tensor got = vg.grad().to(Device::cpu());
      if (accumulate) {
        expect_close_accumulated(got, vc.grad().to(got.dtype()), prior, rtol * 10, atol * 10, "gradient (accumulated)");
      } else {
        expect_close(got.to(kFloat32), vc.grad().to(kFloat32), rtol * 10, atol * 10, "gradient");
      }
    }
  }
};

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
      check("avg_pool2d", {2, 5, 9, 8}, t, nhwc, [](const Variable& x) { return avg_pool2d(x, 3, 2, 1); },
            rtol_of(t, 1e-6f), 1e-6f);
      check("avg_pool2d exclude pad", {2, 5, 9, 8}, t, nhwc,
            [](const Variable& x) { return avg_pool2d(x, Size2d(2, 3), 1, Size2d(1, 1), false); }, rtol_of(t, 1e-6f),
            1e-6f);
      check("global_avg_pool2d", {3, 4, 7, 5}, t, nhwc, [](const Variable& x) { return global_avg_pool2d(x); },
            rtol_of(t, 1e-6f), 1e-6f);
    }
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

// The second shape has enough rows (N*H*W = 1152) and channels (40) that the channels-last
// kernels split both over several blocks and combine partial moments.
TEST_F(NormPoolTest, BatchNormTrainingAgreesIncludingRunningStatistics) {
  DPL_SKIP_WITHOUT_CPU_REFERENCE();
  for (const Shape& shape : {Shape{4, 6, 5, 3}, Shape{8, 40, 12, 12}})
    for (DType t : {kFloat32, kBFloat16, kFloat16})
    for (bool nhwc : {false, true}) {
      const std::int64_t c = shape[1];
      const Tensor w = rand({c}, 0.5f, 1.5f), b = rand({c});
      const Tensor rm = rand({c}), rv = rand({c}, 0.5f, 2.f);
      Tensor rm_c = rm.clone(), rv_c = rv.clone(), rm_g = on_gpu(rm), rv_g = on_gpu(rv);
      check("batch_norm", shape, t, nhwc,
            [&](const Variable& x) {
              const bool cpu = x.data().device().is_cpu();
              const Variable wv(cpu ? w.clone() : on_gpu(w), true), bv(cpu ? b.clone() : on_gpu(b), true);
              return batch_norm(x, wv, bv, cpu ? rm_c : rm_g, cpu ? rv_c : rv_g, true);
            },
            rtol_of(t, 1e-4f), 1e-4f);
      expect_close(rm_g.to(Device::cpu()), rm_c, 1e-5f, 1e-5f, "running_mean");
      expect_close(rv_g.to(Device::cpu()), rv_c, 1e-5f, 1e-5f, "running_var");
    }
}

TEST_F(NormPoolTest, BatchNormEvaluationAgrees) {
  DPL_SKIP_WITHOUT_CPU_REFERENCE();
  const Tensor x = rand({3, 4, 5, 5}), w = rand({4}), b = rand({4}), rm = rand({4}), rv = rand({4}, 0.5f, 2.f);
  NoGradGuard no_grad;
  for (bool nhwc : {false, true}) {
    const Tensor xc = nhwc ? channels_last(x) : x, xg = nhwc ? channels_last(on_gpu(x)) : on_gpu(x);
    const Tensor yc = batch_norm(Variable(xc), Variable(w), Variable(b), rm, rv, false).data();
    const Tensor yg =
        batch_norm(Variable(xg), Variable(on_gpu(w)), Variable(on_gpu(b)), on_gpu(rm), on_gpu(rv), false).data();
    expect_close(yg.to(Device::cpu()), yc, 1e-5f, 1e-5f, nhwc ? "eval channels-last" : "eval NCHW");
  }
}

// Backward through evaluation mode (frozen statistics): the gradients of x, weight and bias.
TEST_F(NormPoolTest, BatchNormEvaluationBackwardAgrees) {
  DPL_SKIP_WITHOUT_CPU_REFERENCE();
  const Tensor x = rand({3, 4, 5, 5}), w = rand({4}), b = rand({4}), rm = rand({4}), rv = rand({4}, 0.5f, 2.f);
  const Tensor gy = rand({3, 4, 5, 5});
  for (bool nhwc : {false, true}) {
    Variable xc(nhwc ? channels_last(x) : x.clone(), true), wc(w.clone(), true), bc(b.clone(), true);
    Variable xg(nhwc ? channels_last(on_gpu(x)) : on_gpu(x), true), wg(on_gpu(w), true), bg(on_gpu(b), true);
    sum(mul(batch_norm(xc, wc, bc, rm, rv, false), Variable(gy))).backward();
    sum(mul(batch_norm(xg, wg, bg, on_gpu(rm), on_gpu(rv), false), Variable(on_gpu(gy)))).backward();
    const char* what = nhwc ? "eval backward channels-last" : "eval backward NCHW";
    expect_close(xg.grad().to(Device::cpu()), xc.grad(), 1e-5f, 1e-5f, what);
    expect_close(wg.grad().to(Device::cpu()), wc.grad(), 1e-4f, 1e-4f, what);
    expect_close(bg.grad().to(Device::cpu()), bc.grad(), 1e-4f, 1e-4f, what);
  }
}

// Channels-last inputs take the GPU's fused kernels (every dtype; an odd channel count takes the
// one-element path, 64 channels the 16-byte vector path over several row groups); NCHW float32
// the composed path on both devices.
TEST_F(NormPoolTest, FusedBatchNormReluAgreesWithTheComposition) {
  DPL_SKIP_WITHOUT_CPU_REFERENCE();
  for (DType t : {kFloat32, kBFloat16, kFloat16})
    for (const Shape& shape : {Shape{4, 37, 5, 3}, Shape{8, 64, 12, 12}, Shape{4, 8, 3, 3}}) {
    const bool fused = shape[1] != 8;
    if (!fused && t != kFloat32) continue;
    const Tensor z = rand(shape).to(t);
    const Tensor w = rand({shape[1]}, 0.5f, 1.5f), b = rand({shape[1]});
    for (bool add : {false, true}) {
      check(add ? "batch_norm_add_relu" : "batch_norm_relu", shape, t, fused,
            [&](const Variable& x) {
              const bool cpu = x.data().device().is_cpu();
              const Variable wv(cpu ? w.clone() : on_gpu(w), true), bv(cpu ? b.clone() : on_gpu(b), true);
              Tensor zt = cpu ? z.to(x.data().dtype()) : on_gpu(z);
              if (fused) zt = channels_last(zt);
              if (!add) return batch_norm_relu(x, wv, bv, Tensor(), Tensor(), true);
              return batch_norm_add_relu(x, Variable(zt), wv, bv, Tensor(), Tensor(), true);
            },
            rtol_of(t, 1e-4f), 1e-3f, /*without_ties=*/false, /*float32_reference=*/fused);
    }
  }
}

// Without a residual the fused kernel's backward recomputes the ReLU's mask from x instead of
// reading y; with a zero residual it reads y. Both must route every gradient the same way, to the
// bit, including where the pre-activation is zero or tiny: the input repeats a few values per
// channel, so many normalise to exactly the (zero) bias.
TEST_F(NormPoolTest, FusedReluMaskFromTheInputMatchesTheMaskFromTheOutput) {
  for (DType t : {kFloat32, kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(t));
    const Shape shape{6, 40, 5, 7};
    std::vector<float> values(6 * 40 * 5 * 7);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(static_cast<int>(i % 5) - 2) * 0.75f;
    const Tensor base = Tensor::from_vector(values, shape).to(t);
    const Tensor w = rand({shape[1]}, -1.5f, 1.5f);
    const Tensor b = Tensor::zeros({shape[1]});
    const Tensor r = rand(shape).to(t);
    Tensor grads[2][3], outs[2];
    for (int add = 0; add < 2; ++add) {
      Variable x(channels_last(on_gpu(base)), true), wv(on_gpu(w), true), bv(on_gpu(b), true);
      const Variable y = add == 0 ? batch_norm_relu(x, wv, bv, Tensor(), Tensor(), true)
                                  : batch_norm_add_relu(x, Variable(channels_last(on_gpu(Tensor::zeros(shape, t)))),
                                                        wv, bv, Tensor(), Tensor(), true);
      outs[add] = y.data().to(Device::cpu()).to(kFloat32);
      sum(mul(y, Variable(channels_last(on_gpu(r))))).backward();
      grads[add][0] = x.grad().to(Device::cpu()).to(kFloat32);
      grads[add][1] = wv.grad().to(Device::cpu());
      grads[add][2] = bv.grad().to(Device::cpu());
    }
    expect_equal<float>(outs[0], outs[1], "forward");
    expect_equal<float>(grads[0][0], grads[1][0], "input gradient");
    expect_equal<float>(grads[0][1], grads[1][1], "weight gradient");
    expect_equal<float>(grads[0][2], grads[1][2], "bias gradient");
  }
}

}  // namespace
}  // namespace dpl::test
