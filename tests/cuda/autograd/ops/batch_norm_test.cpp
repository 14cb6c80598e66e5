// CPU-vs-CUDA agreement of batch normalisation (image_agreement.hpp): forward values, running
// statistics and gradients, and the fused BN+ReLU / BN+add+ReLU path (dpl's channels-last kernels,
// every dtype) against the CPU's composition of the plain ops.
//
// Tolerances: batch norm reduces in a different order on each device (rtol/atol 1e-4 for values,
// 1e-3 for gradients, which sum products over the batch).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "image_agreement.hpp"

namespace dpl::test {
namespace {

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

// Under mixed precision a model's batch-norm weight and bias are 16-bit: the channels-last
// kernels read them and write their gradients in that dtype. Against the same call with float32
// copies of the same (16-bit-representable) values: the same output and input gradient to the
// bit, the parameters' gradients equal to the float32 ones rounded once. A second backward adds
// into them: the fused kernels in place, rounding the float32 sum of the 16-bit gradient and the
// new float32 one once (to the bit); the plain batch norm through float32 scratch (rounded twice,
// close to twice the first).
TEST_F(NormPoolTest, SixteenBitParametersAreReadAndWrittenInTheirDtype) {
  const auto twice = [](const Tensor& t) {
    std::vector<float> v = t.contiguous().to_vector<float>();
    for (float& e : v) e *= 2.f;
    return Tensor::from_vector(v, t.shape());
  };
  // round(float(a16) + a32) in dtype t, as float32: what the fused kernels' accumulation writes.
  const auto accumulated = [](const Tensor& a16, const Tensor& a32, DType t) {
    std::vector<float> v = a16.contiguous().to_vector<float>();
    const std::vector<float> w = a32.contiguous().to_vector<float>();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] += w[i];
    return Tensor::from_vector(v, a16.shape()).to(t).to(kFloat32);
  };
  for (DType t : {kBFloat16, kFloat16})
    for (int kind = 0; kind < 3; ++kind) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (kind == 0 ? " batch_norm" : kind == 1 ? " relu" : " add_relu"));
      const Shape shape{8, 40, 6, 6};
      const Tensor x = channels_last(on_gpu(rand(shape).to(t))), z = channels_last(on_gpu(rand(shape).to(t)));
      const Tensor gy = channels_last(on_gpu(rand(shape).to(t)));
      const Tensor w16 = on_gpu(rand({shape[1]}, 0.5f, 1.5f).to(t)), b16 = on_gpu(rand({shape[1]}).to(t));
      Tensor y[2], gx[2], gw[2], gb[2];
      for (int half = 0; half < 2; ++half) {
        const DType pt = half == 1 ? t : kFloat32;
        Variable xv(x.clone(), true), wv(w16.to(pt), true), bv(b16.to(pt), true);
        Tensor rm = on_gpu(Tensor::zeros({shape[1]})), rv = on_gpu(Tensor::ones({shape[1]}));
        const auto run = [&] {
          const Variable out = kind == 0   ? batch_norm(xv, wv, bv, rm, rv, true)
                               : kind == 1 ? batch_norm_relu(xv, wv, bv, rm, rv, true)
                                           : batch_norm_add_relu(xv, Variable(z), wv, bv, rm, rv, true);
          sum(mul(out, Variable(gy))).backward();
          return out.data();
        };
        y[half] = run().to(Device::cpu()).to(kFloat32);
        gx[half] = xv.grad().to(Device::cpu()).to(kFloat32);
        EXPECT_EQ(wv.grad().dtype(), pt);
        EXPECT_EQ(bv.grad().dtype(), pt);
        gw[half] = wv.grad().to(Device::cpu()).to(kFloat32);
        gb[half] = bv.grad().to(Device::cpu()).to(kFloat32);
        if (half == 1) {
          run();  // accumulates into the 16-bit gradients
          const Tensor gw2 = wv.grad().to(Device::cpu()).to(kFloat32), gb2 = bv.grad().to(Device::cpu()).to(kFloat32);
          if (kind == 0) {
            expect_close(gw2, twice(gw[0]), 2e-2f, 1e-2f, "accumulated weight gradient");
            expect_close(gb2, twice(gb[0]), 2e-2f, 1e-2f, "accumulated bias gradient");
          } else {
            expect_equal<float>(gw2, accumulated(gw[1], gw[0], t), "accumulated weight gradient");
            expect_equal<float>(gb2, accumulated(gb[1], gb[0], t), "accumulated bias gradient");
          }
        }
      }
      expect_equal<float>(y[1], y[0], "forward");
      expect_equal<float>(gx[1], gx[0], "input gradient");
      expect_equal<float>(gw[1], gw[0].to(t).to(kFloat32), "weight gradient");
      expect_equal<float>(gb[1], gb[0].to(t).to(kFloat32), "bias gradient");
    }
}

// num_batches_tracked counts one a training-mode call on every path of the GPU: cuDNN's NCHW call
// (a kernel after it), and the channels-last kernels, where the thread that updates channel 0's
// running statistics counts: after a moments pass (its finalize kernel), from given sums in the
// elementwise pass (up to 1024 channels) or in a finalize kernel (more), and the stem's fused
// pooling. Evaluation and undefined running statistics count nothing.
TEST_F(NormPoolTest, EveryTrainingPathCountsTheBatchOnce) {
  for (DType t : {kFloat32, kBFloat16})
    for (bool nhwc : {false, true})
      for (std::int64_t c : {6, 1040}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + (nhwc ? " channels-last, " : " NCHW, ") + std::to_string(c) +
                     " channels");
        const Tensor base = on_gpu(rand({2, c, 3, 3}, -2.f, 2.f).to(t));
        const Variable x(nhwc ? channels_last(base) : base), z(x.data().clone());
        const Tensor mean = on_gpu(Tensor::zeros({c})), var = on_gpu(Tensor::ones({c}));
        const Tensor count = on_gpu(Tensor::zeros({}, TensorOptions(kInt64)));
        // Sums of a batch with mean 0 and variance 1 (18 values a channel): any valid sums count.
        ChannelSums sums{on_gpu(Tensor::zeros({c})), on_gpu(Tensor::full({c}, 18.f))};
        const auto counted = [&] { return count.to(Device::cpu()).to_vector<std::int64_t>().at(0); };
        const Variable none;
        batch_norm(x, none, none, mean, var, true, 0.1, 1e-5, nullptr, count);
        batch_norm_relu(x, none, none, mean, var, true, 0.1, 1e-5, nullptr, count);
        batch_norm_add_relu(x, z, none, none, mean, var, true, 0.1, 1e-5, nullptr, count);
        EXPECT_EQ(counted(), 3) << "from a pass over x";
        batch_norm(x, none, none, mean, var, true, 0.1, 1e-5, &sums, count);
        batch_norm_relu(x, none, none, mean, var, true, 0.1, 1e-5, &sums, count);
        batch_norm_add_relu(x, z, none, none, mean, var, true, 0.1, 1e-5, &sums, count);
        EXPECT_EQ(counted(), 6) << "from given sums";
        batch_norm_relu_max_pool2d(x, none, none, mean, var, true, Size2d(3), Size2d(2), Size2d(1), 0.1, 1e-5, nullptr,
                                   count);
        batch_norm_relu_max_pool2d(x, none, none, mean, var, true, Size2d(3), Size2d(2), Size2d(1), 0.1, 1e-5, &sums,
                                   count);
        EXPECT_EQ(counted(), 8) << "the stem's pooling";
        batch_norm(x, none, none, mean, var, false, 0.1, 1e-5, nullptr, count);
        batch_norm_relu(x, none, none, Tensor(), Tensor(), true, 0.1, 1e-5, &sums, count);
        EXPECT_EQ(counted(), 8) << "evaluation and no running statistics count nothing";
      }
}

}  // namespace
}  // namespace dpl::test
