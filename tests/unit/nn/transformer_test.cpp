// nn::TransformerEncoderLayer and nn::TransformerEncoder on the CPU: PyTorch's sub-module names, and
// outputs and every gradient against PyTorch's layers (tests/golden/transformer_golden.txt, written
// by tests/golden/make_transformer_golden.py): post-norm with ReLU and a key-padding mask, pre-norm
// with GELU, batch-first and a float mask, and a two-layer pre-norm stack with a final norm,
// is_causal and a key-padding mask; dropout in training only; the errors for bad options.
// Golden tolerances as tests/unit/nn/multihead_attention_test.cpp's, a little wider for the
// stack's two layers and normalisations.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/golden.hpp"

namespace dpl {
namespace {

using ::testing::HasSubstr;
using test::expect_golden;
using test::GoldenCase;

constexpr float kRtol = 1e-4f, kAtol = 5e-5f;

const GoldenCase& golden(const std::string& name) {
  static const std::vector<GoldenCase> cases = test::load_golden("transformer_golden.txt");
  return test::golden_case(cases, name, "transformer_golden.txt");
}

nn::TransformerEncoderLayerOptions layer_options(const GoldenCase& c) {
  return nn::TransformerEncoderLayerOptions(c.int_param("d_model"), c.int_param("nhead"))
      .dim_feedforward(c.int_param("ff"))
      .dropout(0.f)
      .activation(c.int_param("gelu") == 1 ? nn::TransformerActivation::kGELU : nn::TransformerActivation::kReLU)
      .batch_first(c.int_param("batch_first") == 1)
      .norm_first(c.int_param("norm_first") == 1);
}

// The module's parameters set from the case (by PyTorch's names), its forward on the case's input
// and masks, and the output and every gradient against PyTorch's.
template <typename M>
void check(M& module, const GoldenCase& c) {
  for (const auto& [name, p] : module.named_parameters()) {
    ASSERT_TRUE(c.tensors.count(name)) << "PyTorch has no parameter " << name;
    Tensor(p.data()).copy_(c.tensor(name));
  }
  Variable src(c.tensor("src").clone(), true);
  const Tensor kpm = c.tensors.count("src_key_padding_mask") ? test::golden_mask(c.tensor("src_key_padding_mask")) : Tensor();
  const Tensor mask = c.tensors.count("src_mask") ? c.tensor("src_mask") : Tensor();
  const Variable out = module.forward(src, mask, kpm, c.int_param("causal") == 1);
  expect_golden(out.data(), c.tensor("out"), "out", kRtol, kAtol);
  sum(mul(out, Variable(c.tensor("gy")))).backward();
  expect_golden(src.grad(), c.tensor("g_src"), "src gradient", kRtol, kAtol);
  for (const auto& [name, p] : module.named_parameters())
    expect_golden(p.grad(), c.tensor("g_" + name), name + " gradient", kRtol, kAtol);
}

TEST(TransformerEncoderLayer, MatchesPyTorch) {
  for (const char* name : {"layer_post_norm_relu", "layer_pre_norm_gelu_batch_first"}) {
    SCOPED_TRACE(name);
    const GoldenCase& c = golden(name);
    ASSERT_FALSE(c.tensors.empty());
    nn::TransformerEncoderLayer layer(layer_options(c));
    EXPECT_EQ(layer.named_parameters().size(), 12u);
    check(layer, c);
  }
}

TEST(TransformerEncoder, MatchesPyTorch) {
  const GoldenCase& c = golden("encoder_two_layers_norm_causal");
  ASSERT_FALSE(c.tensors.empty());
  nn::TransformerEncoder encoder(nn::TransformerEncoderOptions(layer_options(c), c.int_param("layers")).norm(true));
  EXPECT_EQ(encoder.named_parameters().size(), 26u);
  check(encoder, c);
}

TEST(TransformerEncoderLayer, DropsOutInTrainingOnly) {
  Generator gen(4);
  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.5f), gen);
  const Variable x(Tensor::normal({5, 2, 8}, 0.f, 1.f, gen));
  layer.eval();
  const std::vector<float> a = layer.forward(x).data().to_vector<float>();
  EXPECT_EQ(a, layer.forward(x).data().to_vector<float>()) << "eval() is deterministic";
  layer.train();
  EXPECT_NE(a, layer.forward(x).data().to_vector<float>()) << "training drops";
}

TEST(TransformerEncoderLayer, RefusesBadOptions) {
  using Options = nn::TransformerEncoderLayerOptions;
  DPL_EXPECT_ERROR(nn::TransformerEncoderLayer(Options(8, 3)), HasSubstr("expected num_heads to divide embed_dim"));
  DPL_EXPECT_ERROR(nn::TransformerEncoderLayer(Options(8, 2).dim_feedforward(0)),
                   HasSubstr("expected dim_feedforward >= 1, got 0"));
  DPL_EXPECT_ERROR(nn::TransformerEncoderLayer(Options(8, 2).dropout(-0.1f)),
                   HasSubstr("dropout probability in [0, 1)"));
  DPL_EXPECT_ERROR(nn::TransformerEncoder(nn::TransformerEncoderOptions(Options(8, 2), 0)),
                   HasSubstr("expected num_layers >= 1, got 0"));
}

}  // namespace
}  // namespace dpl
