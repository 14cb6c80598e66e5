// GPT-2 on the GPU against the CPU: a tiny model built twice from one seed, one copy moved to the
// GPU, its logits, loss and every parameter's gradient for the same ids; in float32, and in
// bfloat16 under optim::mixed_precision (the GPU's attention on cuDNN's fused kernels where the
// build has them, the CPU's in float32 math on bfloat16 values); and GPT2::loss, the head and the
// loss a chunk of rows at a time, against the logits path on the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "dpl/dpl.hpp"

namespace dpl::test {
namespace {

float largest_abs(const Tensor& t) {
  float m = 0.f;
  for (float v : t.to(kFloat32).to_vector<float>()) m = std::max(m, std::fabs(v));
  return m;
}

class GPT2Test : public CudaTest {
 protected:
  // Vocabulary 64, block 16, 2 layers, 4 heads, width 32.
  static models::GPT2Config tiny() { return {64, 16, 2, 4, 32, true}; }

  Tensor ids(std::int64_t b, std::int64_t t) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(b * t));
    for (auto& x : v) x = static_cast<std::int64_t>(gen_.below(64));
    return Tensor::from_vector(v, {b, t});
  }

  // Forward and backward of the mean cross entropy on each model; compares logits, loss and the
  // gradient arenas (the same layout on both devices).
  void compare(models::GPT2& cpu, models::GPT2& gpu_model, DType dt, float rtol, float atol) {
    const Tensor x = ids(3, 13), y = labels(39, 64);
    const Variable lc = cpu(Variable(x)), lg = gpu_model(Variable(on_gpu(x)));
    expect_close(lg.data(), lc.data(), rtol, atol, "logits");
    const Variable loss_c = softmax_cross_entropy(reshape(lc, {39, 64}), y);
    const Variable loss_g = softmax_cross_entropy(reshape(lg, {39, 64}), on_gpu(y));
    EXPECT_NEAR(loss_g.item(), loss_c.item(), dt == kFloat32 ? 1e-4 : 2e-2);
    loss_c.backward();
    loss_g.backward();
    const auto pc = cpu.named_parameters(), pg = gpu_model.named_parameters();
    ASSERT_EQ(pc.size(), pg.size());
    for (std::size_t i = 0; i < pc.size(); ++i) {
      EXPECT_EQ(pg[i].second.grad().device(), gpu());
      EXPECT_EQ(pg[i].second.grad().dtype(), dt) << pg[i].first;
      expect_close(pg[i].second.grad(), pc[i].second.grad(), rtol, atol, pg[i].first);
    }
  }
};

TEST_F(GPT2Test, Float32ForwardAndBackwardMatchCpu) {
  Generator g1(seed_), g2(seed_);
  models::GPT2 cpu(tiny(), g1), gpu_model(tiny(), g2);
  gpu_model.to(gpu());
  compare(cpu, gpu_model, kFloat32, 1e-3f, 1e-4f);
}

TEST_F(GPT2Test, BFloat16UnderMixedPrecisionMatchesCpu) {
  Generator g1(seed_), g2(seed_);
  models::GPT2 cpu(tiny(), g1), gpu_model(tiny(), g2);
  gpu_model.to(gpu());
  auto oc = optim::mixed_precision(std::make_unique<optim::AdamW>(), kBFloat16);
  auto og = optim::mixed_precision(std::make_unique<optim::AdamW>(), kBFloat16);
  oc->setup(cpu);
  og->setup(gpu_model);
  ASSERT_EQ(gpu_model.arena().params().dtype(), kBFloat16);
  // bfloat16 keeps 8 bits: the two devices round different float32 sums.
  compare(cpu, gpu_model, kBFloat16, 5e-2f, 2e-2f);
}

TEST_F(GPT2Test, ChunkedLossMatchesTheLogitsLossOnTheGpu) {
  // GPT2::loss (the head and the loss 10 rows at a time over 39, and the chosen chunk) against the
  // logits path of the same GPU model: its loss and every gradient, the tied wte's included. float32
  // to rounding (1e-5 of each gradient's largest element); bfloat16 under mixed precision within
  // 2^-4 of it: the logits' gradient is rounded per chunk's mean, and that difference passes back
  // through both blocks (the CPU's test of the same comparison sees at most 1.4 * 2^-7).
  for (const DType dt : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Generator g(seed_);
    models::GPT2 model(tiny(), g);
    model.to(gpu());
    auto opt = optim::mixed_precision(std::make_unique<optim::AdamW>(), dt);
    opt->setup(model);
    const Tensor x = on_gpu(ids(3, 13)), y = on_gpu(labels(39, 64));
    model.zero_grad();
    const Variable want = softmax_cross_entropy(reshape(model(Variable(x)), {39, 64}), y);
    want.backward();
    std::vector<Tensor> want_grads;  // host copies: zero_grad clears the arena
    for (const auto& [name, p] : model.named_parameters()) want_grads.push_back(p.grad().to(Device::cpu()));
    for (const std::int64_t rows : {10, 0}) {
      model.zero_grad();
      const Variable got = model.loss(Variable(x), y.reshape({3, 13}), rows);
      EXPECT_EQ(got.data().dtype(), dt);
      EXPECT_NEAR(got.item(), want.item(), dt == kFloat32 ? 1e-5 : 2e-2);
      got.backward();
      const auto params = model.named_parameters();
      for (std::size_t i = 0; i < params.size(); ++i) {
        const Tensor& w = want_grads[i];
        const float tol = (dt == kFloat32 ? 1e-5f : 1.f / 16) * largest_abs(w) + (dt == kFloat32 ? 1e-7f : 0.f);
        expect_close(params[i].second.grad(), w, 0.f, tol, params[i].first + ", chunk_rows " + std::to_string(rows));
      }
    }
  }
}

}  // namespace
}  // namespace dpl::test
