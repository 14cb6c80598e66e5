// CPU-vs-CUDA agreement of the normalisations by each sample's own statistics (layer_norm,
// group_norm) and of BatchNorm1d (batch_norm of a view), for
// float32, bfloat16 and float16 inputs with parameters of the input's dtype or float32: outputs
// and the gradients of input, weight and bias, written into fresh buffers (the allocator's cache
// first filled with NaN) and accumulated onto existing ones.
//
// Tolerances: both devices compute in float32 and round once, but sum the rows in a different
// order: rtol/atol 1e-4 for float32 values, 1e-3 for the parameters' gradients (sums over every
// row); a 16-bit result may differ by one rounding (2^-7 bfloat16, 2^-10 float16 relative) plus
// the 16-bit rounding of the inputs' products (atol 1e-2, the parameters' gradients scaled by
// their magnitude).
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class NormalizationTest : public CudaTest {
 protected:
  using Op = std::function<Variable(const Variable& x, const Variable& w, const Variable& b)>;

  static float rtol_of(DType t, float fp32) { return t == kFloat32 ? fp32 : t == kBFloat16 ? 1.f / 64 : 1.f / 256; }

  // |got - want| within the dtype's tolerance, atol scaled by the largest |want| for 16-bit sums.
  static void close(const Tensor& got, const Tensor& want, DType t, float fp32_atol, const std::string& what,
                    const Tensor& prior = Tensor()) {
    float atol = fp32_atol;
    if (t != kFloat32) {
      const std::vector<float> w = want.to(kFloat32).to_vector<float>();
      float largest = 0.f;
      for (float v : w) largest = std::max(largest, std::fabs(v));
      atol = std::max(1e-2f, largest * (t == kBFloat16 ? 1.f / 64 : 1.f / 256));
    }
    const Tensor g = got.to(Device::cpu());
    if (prior.defined()) return expect_close_accumulated(g, want.to(g.dtype()), prior, rtol_of(t, 1e-4f), atol, what);
    expect_close(g, want, rtol_of(t, 1e-4f), atol, what);
  }

  // Runs op on x (shape, dtype t) and parameters of param_shape (dtype pt; absent when
  // param_shape is empty) on both devices and compares output and gradients.
  void check(const std::string& name, const Shape& shape, const Shape& param_shape, DType t, DType pt, const Op& op) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(name + " " + dtype_name(t) + " parameters " + dtype_name(pt) +
                   (accumulate ? " (accumulating gradients)" : " (fresh gradients)"));
      // push_back, not a one-element initializer list, which g++ 12 misreads as reading past it
      // (-Warray-bounds).
      std::vector<Tensor> values;
      values.push_back(rand(shape).to(t));
      std::vector<DType> types = {t};
      if (!param_shape.empty()) {
        values.push_back(rand(param_shape, 0.5f, 1.5f).to(pt));
        values.push_back(rand(param_shape).to(pt));
        types.push_back(pt);
        types.push_back(pt);
      }
      std::vector<Variable> vc, vg;
      std::vector<Tensor> prior;
      for (std::size_t i = 0; i < values.size(); ++i) {
        vc.emplace_back(values[i].clone(), true);
        vg.emplace_back(on_gpu(values[i]), true);
        if (accumulate) {
          const Tensor p = rand(values[i].shape()).to(types[i]);
          vc.back().set_grad(p.clone());
          vg.back().set_grad(on_gpu(p));
          prior.push_back(p);
        }
      }
      const auto run = [&](const std::vector<Variable>& v) {
        return v.size() > 1 ? op(v[0], v[1], v[2]) : op(v[0], Variable(), Variable());
      };
      const Variable yc = run(vc), yg = run(vg);
      ASSERT_EQ(yg.device(), gpu());
      close(yg.data(), yc.data(), t, 1e-4f, "forward");
      const Tensor w = rand(yc.shape()).to(t);
      sum(mul(yc, Variable(w))).backward();
      if (!accumulate) {
        std::vector<Tensor> held;
        for (int copies = 0; copies < 3; ++copies)
          for (const Tensor& v : values) held.push_back(poisoned(v.shape()).to(v.dtype()));
      }
      sum(mul(yg, Variable(on_gpu(w)))).backward();
      for (std::size_t i = 0; i < values.size(); ++i) {
        ASSERT_TRUE(vg[i].grad().defined()) << "input " << i << " got no gradient on the GPU";
        close(vg[i].grad(), vc[i].grad(), types[i], i == 0 ? 1e-4f : 1e-3f, "grad of input " + std::to_string(i),
              accumulate ? prior[i] : Tensor());
      }
    }
  }
};

// Rows shorter than a warp, of one block's width, and longer than a block (several elements per
// thread); a column count that does not fill the last tile of the parameters' column sums. Rows
// whose length is a multiple of 16 bytes' elements and at most 8 such packs per lane (GPT-2's
// 768; 1024 in float32, 2048 in 16-bit at the limit) take the warp-per-row kernels; 2048 in
// float32, 300 in 16-bit and the odd lengths the block-per-row ones.
TEST_F(NormalizationTest, LayerNormAgrees) {
  const struct {
    Shape x, normalized;
  } cases[] = {{{7, 5}, {5}},      {{3, 4, 64}, {4, 64}}, {{2, 3, 300}, {300}}, {{130, 33}, {33}},
               {{1, 1024}, {1024}}, {{16, 768}, {768}},    {{4, 2048}, {2048}}};
  for (const auto& c : cases)
    for (DType t : {kFloat32, kBFloat16, kFloat16})
      for (DType pt : {t, kFloat32}) {
        const Shape ns = c.normalized;
        check("layer_norm " + shape_str(c.x), c.x, ns, t, pt,
              [&](const Variable& x, const Variable& w, const Variable& b) { return layer_norm(x, ns, w, b); });
        if (pt == t)
          check("layer_norm without affine " + shape_str(c.x), c.x, {}, t, pt,
                [&](const Variable& x, const Variable&, const Variable&) { return layer_norm(x, ns); });
      }
}

// Only the parameters need gradients: the input's gradient is not computed.
TEST_F(NormalizationTest, LayerNormParameterGradientsAlone) {
  const Tensor x = rand({9, 40}), w = rand({40}), b = rand({40}), gy = rand({9, 40});
  Variable wc(w.clone(), true), bc(b.clone(), true), wg(on_gpu(w), true), bg(on_gpu(b), true);
  sum(mul(layer_norm(Variable(x), {40}, wc, bc), Variable(gy))).backward();
  sum(mul(layer_norm(Variable(on_gpu(x)), {40}, wg, bg), Variable(on_gpu(gy)))).backward();
  expect_close(wg.grad().to(Device::cpu()), wc.grad(), 1e-4f, 1e-4f, "weight");
  expect_close(bg.grad().to(Device::cpu()), bc.grad(), 1e-4f, 1e-4f, "bias");
}

// Small and large groups (a row longer than a block), several groups per sample, inner 1 (the
// parameters' column sums with groups) and a channels-last image.
TEST_F(NormalizationTest, GroupNormAgrees) {
  const struct {
    Shape x;
    std::int64_t groups;
  } cases[] = {{{2, 6, 3, 4}, 3}, {{4, 32, 16, 16}, 8}, {{5, 8}, 2}, {{2, 4, 5}, 4}, {{3, 6, 7}, 1}};
  for (const auto& c : cases)
    for (DType t : {kFloat32, kBFloat16, kFloat16})
      for (DType pt : {t, kFloat32}) {
        const std::int64_t g = c.groups;
        check("group_norm " + shape_str(c.x), c.x, {c.x[1]}, t, pt,
              [&](const Variable& x, const Variable& w, const Variable& b) { return group_norm(x, g, w, b); });
        if (pt == t)
          check("group_norm without affine " + shape_str(c.x), c.x, {}, t, pt,
                [&](const Variable& x, const Variable&, const Variable&) { return group_norm(x, g); });
      }
}

TEST_F(NormalizationTest, GroupNormOfChannelsLastImagesAgrees) {
  const Tensor x = rand({3, 8, 5, 6}), w = rand({8}), b = rand({8}), gy = rand({3, 8, 5, 6});
  Variable xc(x.to_channels_last(), true), xg(on_gpu(x).to_channels_last(), true);
  const Variable yc = group_norm(xc, 4, Variable(w), Variable(b));
  const Variable yg = group_norm(xg, 4, Variable(on_gpu(w)), Variable(on_gpu(b)));
  expect_close(yg.data().to(Device::cpu()), yc.data(), 1e-4f, 1e-4f, "forward");
  sum(mul(yc, Variable(gy))).backward();
  sum(mul(yg, Variable(on_gpu(gy)))).backward();
  EXPECT_TRUE(xg.grad().is_channels_last());
  expect_close(xg.grad().to(Device::cpu()), xc.grad(), 1e-4f, 1e-4f, "grad of the input");
}

// BatchNorm1d modules on both devices with the same parameters: output, gradients and running
// statistics after a training step, for (N, C) and (N, C, L) inputs of every dtype.
TEST_F(NormalizationTest, BatchNorm1dAgrees) {
  DPL_SKIP_WITHOUT_CPU_REFERENCE();
  for (const Shape& shape : {Shape{16, 5}, Shape{4, 6, 9}})
    for (DType t : {kFloat32, kBFloat16, kFloat16}) {
      SCOPED_TRACE(shape_str(shape) + " " + dtype_name(t));
      const std::int64_t c = shape[1];
      nn::BatchNorm1d cpu(c), gpu_bn(c);
      Tensor wc = cpu.weight().data(), bc = cpu.bias().data();
      wc.copy_(rand({c}, 0.5f, 1.5f));
      bc.copy_(rand({c}));
      Tensor wg = gpu_bn.weight().data(), bg = gpu_bn.bias().data();
      wg.copy_(wc);
      bg.copy_(bc);
      gpu_bn.to(gpu());
      const Tensor x = rand(shape).to(t), gy = rand(shape).to(t);
      Variable xc(x.clone(), true), xg(on_gpu(x), true);
      const Variable yc = cpu.forward(xc), yg = gpu_bn.forward(xg);
      close(yg.data(), yc.data(), t, 1e-4f, "forward");
      sum(mul(yc, Variable(gy))).backward();
      sum(mul(yg, Variable(on_gpu(gy)))).backward();
      close(xg.grad(), xc.grad(), t, 1e-4f, "grad of the input");
      close(gpu_bn.weight().grad(), cpu.weight().grad(), t, 1e-3f, "grad of the weight");
      close(gpu_bn.bias().grad(), cpu.bias().grad(), t, 1e-3f, "grad of the bias");
      expect_close(gpu_bn.running_mean().to(Device::cpu()), cpu.running_mean(), 1e-5f, 1e-5f, "running_mean");
      expect_close(gpu_bn.running_var().to(Device::cpu()), cpu.running_var(), 1e-5f, 1e-5f, "running_var");
    }
}

}  // namespace
}  // namespace dpl::test
