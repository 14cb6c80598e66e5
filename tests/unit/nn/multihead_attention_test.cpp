// nn::MultiheadAttention on the CPU: PyTorch's parameter names, shapes and initialisation; its
// outputs, attention weights and every gradient against PyTorch's nn.MultiheadAttention
// (tests/golden/multihead_attention_golden.txt, written by
// tests/golden/make_multihead_attention_golden.py) with sequence-first and batch-first inputs,
// unbatched inputs, uint8 and float masks of every accepted shape, is_causal, per-head weights and
// no bias; a PyTorch state_dict loaded with load_weights; the fused path against the composed one;
// dropout of the weights in training only; and the errors for bad options and inputs.
// Golden tolerances: the inputs and parameters are exact in float32, what remains is float32
// arithmetic through two projections, a softmax and the products (1e-5 relative, 2e-5 absolute).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/golden.hpp"
#include "support/source_tree.hpp"

namespace dpl {
namespace {

using ::testing::HasSubstr;
using test::expect_golden;
using test::GoldenCase;

constexpr float kRtol = 1e-5f, kAtol = 2e-5f;

const GoldenCase& golden(const std::string& name) {
  static const std::vector<GoldenCase> cases = test::load_golden("multihead_attention_golden.txt");
  return test::golden_case(cases, name, "multihead_attention_golden.txt");
}

// A golden 0/1 mask as uint8 (PyTorch's bool), or its values as float32.
Tensor mask_of(const GoldenCase& c, const std::string& name, const char* kind_key) {
  if (!c.tensors.count(name)) return Tensor();
  const Tensor& t = c.tensor(name);
  return c.int_param(kind_key) == 1 ? test::golden_mask(t) : t;
}

TEST(MultiheadAttention, HasPyTorchsParametersAndInitialisation) {
  Generator gen(3);
  nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(16, 4), gen);
  const auto params = mha.named_parameters();
  ASSERT_EQ(params.size(), 4u);
  const std::vector<std::pair<std::string, Shape>> want = {
      {"in_proj_weight", {48, 16}}, {"in_proj_bias", {48}}, {"out_proj.weight", {16, 16}}, {"out_proj.bias", {16}}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(params[i].first, want[i].first);
    EXPECT_EQ(params[i].second.shape(), want[i].second) << want[i].first;
  }
  // Xavier-uniform over (48, 16): bound sqrt(6 / 64); out_proj: uniform in 1 / sqrt(16); biases 0.
  const auto within = [](const Variable& v, double bound) {
    double largest = 0.0;
    for (float x : v.data().to_vector<float>()) largest = std::max(largest, std::fabs(static_cast<double>(x)));
    EXPECT_LE(largest, bound);
    EXPECT_GT(largest, 0.5 * bound);  // drawn, not left at zero
  };
  within(mha.in_proj_weight(), std::sqrt(6.0 / 64));
  within(mha.out_proj().weight(), 1.0 / 4);
  for (const Variable& b : {mha.in_proj_bias(), mha.out_proj().bias()})
    for (float x : b.data().to_vector<float>()) EXPECT_EQ(x, 0.f);

  nn::MultiheadAttention plain(nn::MultiheadAttentionOptions(6, 3).bias(false), gen);
  const auto names = plain.named_parameters();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].first, "in_proj_weight");
  EXPECT_EQ(names[1].first, "out_proj.weight");
  EXPECT_FALSE(plain.in_proj_bias().defined());
}

TEST(MultiheadAttention, MatchesPyTorch) {
  for (const char* name : {"self_sequence_first", "cross_batch_first_masks", "bool_mask_per_head_no_bias",
                           "causal_no_weights", "causal_with_weights", "unbatched_float_padding",
                           "unbatched_heads_no_weights"}) {
    SCOPED_TRACE(name);
    const GoldenCase& c = golden(name);
    ASSERT_FALSE(c.tensors.empty());
    nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(c.int_param("embed_dim"), c.int_param("num_heads"))
                                   .bias(c.int_param("bias") == 1)
                                   .batch_first(c.int_param("batch_first") == 1));
    for (const auto& [pname, p] : mha.named_parameters()) Tensor(p.data()).copy_(c.tensor(pname));
    Variable q(c.tensor("query").clone(), true), k(c.tensor("key").clone(), true), v(c.tensor("value").clone(), true);
    const bool need_weights = c.int_param("need_weights") == 1;
    const auto [out, weights] =
        mha.forward(q, k, v, mask_of(c, "key_padding_mask", "kpm_bool"), need_weights,
                    mask_of(c, "attn_mask", "mask_bool"), c.int_param("average") == 1, c.int_param("causal") == 1);
    expect_golden(out.data(), c.tensor("out"), "out", kRtol, kAtol);
    Variable loss = sum(mul(out, Variable(c.tensor("gy"))));
    ASSERT_EQ(weights.defined(), need_weights);
    if (need_weights) {
      expect_golden(weights.data(), c.tensor("weights"), "weights", kRtol, kAtol);
      loss = add(loss, sum(mul(weights, Variable(c.tensor("gw")))));
    }
    loss.backward();
    expect_golden(q.grad(), c.tensor("g_query"), "query gradient", kRtol, kAtol);
    expect_golden(k.grad(), c.tensor("g_key"), "key gradient", kRtol, kAtol);
    expect_golden(v.grad(), c.tensor("g_value"), "value gradient", kRtol, kAtol);
    for (const auto& [pname, p] : mha.named_parameters())
      expect_golden(p.grad(), c.tensor("g_" + pname), pname + " gradient", kRtol, kAtol);
  }
}

TEST(MultiheadAttention, LoadsAPyTorchStateDict) {
  const GoldenCase& c = golden("multihead_attention_module");
  ASSERT_FALSE(c.tensors.empty());
  nn::MultiheadAttention mha(8, 2);
  nn::load_weights(mha, source_path("tests/golden/multihead_attention_module_state_dict.safetensors"));
  mha.eval();
  const Variable x(c.tensor("x"));
  expect_golden(std::get<0>(mha.forward(x, x, x)).data(), c.tensor("y"), "self-attention output", kRtol, kAtol);
}

// Without masks, weights to return or dropout the layer runs the fused attention op; with any of
// them, the composition that keeps the weights. Same values either way, causal or not, for key
// sequences of several lengths one after the other (the composed path keeps its causal mask while
// the shape stays and builds another when it changes).
TEST(MultiheadAttention, TheFusedPathGivesTheComposedOnesValues) {
  Generator gen(5);
  nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(12, 3).batch_first(true), gen);
  const Variable q(Tensor::normal({2, 5, 12}, 0.f, 1.f, gen));
  for (std::int64_t keys : {7, 7, 4})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::to_string(keys) + " keys");
      const Variable kv(Tensor::normal({2, keys, 12}, 0.f, 1.f, gen));
      const Variable fused = std::get<0>(mha.forward(q, kv, kv, Tensor(), false, Tensor(), true, causal));
      const Variable composed = std::get<0>(mha.forward(q, kv, kv, Tensor(), true, Tensor(), true, causal));
      expect_golden(fused.data(), composed.data(), causal ? "causal" : "not causal", 1e-5f, 1e-6f);
    }
}

// Dropout zeroes attention weights in training, scaling the others by 1 / (1 - p), and does nothing
// in eval().
TEST(MultiheadAttention, DropsWeightsInTrainingOnly) {
  Generator gen(7);
  nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(8, 2).dropout(0.5f), gen);
  const Variable x(Tensor::normal({6, 3, 8}, 0.f, 1.f, gen));
  mha.eval();
  const Variable kept = std::get<1>(mha.forward(x, x, x, Tensor(), true, Tensor(), false));
  const Variable again = std::get<1>(mha.forward(x, x, x, Tensor(), true, Tensor(), false));
  EXPECT_EQ(kept.data().to_vector<float>(), again.data().to_vector<float>());
  mha.train();
  const Variable dropped = std::get<1>(mha.forward(x, x, x, Tensor(), true, Tensor(), false));
  const std::vector<float> a = kept.data().to_vector<float>(), b = dropped.data().to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  std::size_t zeros = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (b[i] == 0.f) {
      ++zeros;
      continue;
    }
    EXPECT_NEAR(b[i], 2.f * a[i], 1e-6f) << "weight " << i;
  }
  EXPECT_GT(zeros, a.size() / 4);
  EXPECT_LT(zeros, 3 * a.size() / 4);
}

TEST(MultiheadAttention, RefusesBadOptionsAndInputs) {
  using nn::MultiheadAttentionOptions;
  DPL_EXPECT_ERROR(nn::MultiheadAttention(MultiheadAttentionOptions(10, 4)),
                   HasSubstr("expected num_heads to divide embed_dim, got embed_dim 10 and 4 heads"));
  DPL_EXPECT_ERROR(nn::MultiheadAttention(MultiheadAttentionOptions(0, 1)), HasSubstr("embed_dim >= 1"));
  DPL_EXPECT_ERROR(nn::MultiheadAttention(MultiheadAttentionOptions(8, 2).dropout(1.f)),
                   HasSubstr("dropout probability in [0, 1), got 1"));
  nn::MultiheadAttention mha(8, 2);
  const Variable x(Tensor::zeros({4, 2, 8})), wide(Tensor::zeros({4, 2, 6})), flat(Tensor::zeros({4, 8}));
  DPL_EXPECT_ERROR(mha.forward(x, wide, wide), HasSubstr("expected query (L, N, 8), key and value (S, N, 8)"));
  DPL_EXPECT_ERROR(mha.forward(x, flat, flat), HasSubstr("all batched (3-D) or all unbatched (2-D)"));
  DPL_EXPECT_ERROR(mha.forward(x, x, x, Tensor::zeros({2, 3}, TensorOptions(kUInt8))),
                   HasSubstr("expected key_padding_mask of shape (2, 4), got uint8 (2, 3)"));
  DPL_EXPECT_ERROR(mha.forward(x, x, x, Tensor(), true, Tensor::zeros({4, 4}, TensorOptions(kInt64))),
                   HasSubstr("expected attn_mask of uint8 (1 excludes a key) or a float dtype"));
  DPL_EXPECT_ERROR(mha.forward(x, x, x, Tensor(), true, Tensor::zeros({3, 4, 4})),
                   HasSubstr("expected attn_mask of shape (4, 4) or (4, 4, 4), got float32 (3, 4, 4)"));
}

}  // namespace
}  // namespace dpl
