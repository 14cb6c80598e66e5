// nn::MultiheadAttention on the GPU against the same layer on the CPU: outputs, attention weights
// and every gradient, on the fused path (no masks or weights: the attention op's kernels) and on
// the composed one (uint8 and float masks, is_causal, per-head weights), in float32. (The 16-bit
// paths of the ops it is made of have their own GPU tests; the layer adds no kernel.)
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class MultiheadAttentionCuda : public CudaTest {};

TEST_F(MultiheadAttentionCuda, AgreesWithTheCpu) {
  for (const bool masked : {false, true}) {
    SCOPED_TRACE(masked ? "masks and weights" : "fused");
    const float tol = 1e-4f;
    Generator init(11);
    nn::MultiheadAttention cpu(nn::MultiheadAttentionOptions(32, 4).batch_first(true), init);
    Generator init_again(11);
    nn::MultiheadAttention gpu_layer(nn::MultiheadAttentionOptions(32, 4).batch_first(true), init_again);
    gpu_layer.to(gpu());
    const Tensor q = rand({2, 6, 32}), kv = rand({2, 9, 32}), gy = rand({2, 6, 32});
    std::vector<std::uint8_t> padding(2 * 9, 0);
    padding[5] = padding[9 + 8] = 1;  // one key of each sequence left out
    const Tensor kpm = Tensor::from_vector(padding, {2, 9});
    const Tensor bias = rand({6, 9}, -0.5f, 0.5f);
    const auto run = [&](nn::MultiheadAttention& layer, const Device& device) {
      Variable qv(q.to(device), true), kvv(kv.to(device), true);
      const auto [out, weights] = masked ? layer.forward(qv, kvv, kvv, kpm.to(device), true, bias.to(device), false,
                                                         true)
                                         : layer.forward(qv, kvv, kvv, Tensor(), false);
      sum(mul(out, Variable(gy.to(device)))).backward();
      std::vector<Tensor> results = {out.data(), qv.grad(), kvv.grad()};
      if (weights.defined()) results.push_back(weights.data());
      for (const auto& [name, p] : layer.named_parameters()) results.push_back(p.grad());
      return results;
    };
    const std::vector<Tensor> want = run(cpu, Device::cpu()), got = run(gpu_layer, gpu());
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      expect_close(got[i].to(Device::cpu()), want[i], tol, tol, "result " + std::to_string(i));
  }
}

}  // namespace
}  // namespace dpl::test
