// The transformer layers on the CPU (nn::TransformerEncoderLayer, TransformerEncoder,
// TransformerDecoderLayer, TransformerDecoder): PyTorch's sub-module names, and outputs and every
// gradient against PyTorch's layers (tests/golden/transformer_golden.txt, written by
// tests/golden/make_transformer_golden.py): post-norm with ReLU and a key-padding mask, pre-norm with
// GELU, batch-first and a float mask, two-layer pre-norm stacks with a final norm, is_causal (or
// tgt_is_causal), memory masks; dropout in training only; the errors for bad options.
// Golden tolerances as tests/unit/nn/multihead_attention_test.cpp's, a little wider for the
// stack's two layers and normalisations.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
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

// A mask of the case under the forward's argument name: uint8 where PyTorch's was bool (the case's
// values are 0 and 1 then), else the float values; undefined where the case has none.
Tensor mask(const GoldenCase& c, const std::string& name, bool is_bool) {
  if (!c.tensors.count(name)) return Tensor();
  return is_bool ? test::golden_mask(c.tensor(name)) : c.tensor(name);
}

// The module's parameters set from the case (by PyTorch's names), `run` on the case's inputs
// (named `inputs`, each requiring a gradient), and the output and every gradient against
// PyTorch's.
template <typename M, typename Run>
void check(M& module, const GoldenCase& c, const std::vector<std::string>& inputs, const Run& run) {
  for (const auto& [name, p] : module.named_parameters()) {
    ASSERT_TRUE(c.tensors.count(name)) << "PyTorch has no parameter " << name;
    Tensor(p.data()).copy_(c.tensor(name));
  }
  std::vector<Variable> xs;
  for (const std::string& name : inputs) xs.emplace_back(c.tensor(name).clone(), true);
  const Variable out = run(xs);
  expect_golden(out.data(), c.tensor("out"), "out", kRtol, kAtol);
  sum(mul(out, Variable(c.tensor("gy")))).backward();
  for (std::size_t i = 0; i < inputs.size(); ++i)
    expect_golden(xs[i].grad(), c.tensor("g_" + inputs[i]), inputs[i] + " gradient", kRtol, kAtol);
  for (const auto& [name, p] : module.named_parameters())
    expect_golden(p.grad(), c.tensor("g_" + name), name + " gradient", kRtol, kAtol);
}

// An encoder layer or stack on the case's src; the stack calls its attention mask "mask".
template <typename M>
void check_encoder(M& module, const GoldenCase& c, const char* mask_name) {
  check(module, c, {"src"}, [&](const std::vector<Variable>& x) {
    return module.forward(x[0], mask(c, mask_name, false), mask(c, "src_key_padding_mask", true),
                          c.int_param("causal") == 1);
  });
}

// A decoder layer or stack on the case's tgt and memory.
template <typename M>
void check_decoder(M& module, const GoldenCase& c) {
  check(module, c, {"tgt", "memory"}, [&](const std::vector<Variable>& x) {
    return module.forward(x[0], x[1], mask(c, "tgt_mask", false), mask(c, "memory_mask", false),
                          mask(c, "tgt_key_padding_mask", true), mask(c, "memory_key_padding_mask", true),
                          c.int_param("causal") == 1);
  });
}

TEST(TransformerEncoderLayer, MatchesPyTorch) {
  for (const char* name : {"layer_post_norm_relu", "layer_pre_norm_gelu_batch_first"}) {
    SCOPED_TRACE(name);
    const GoldenCase& c = golden(name);
    ASSERT_FALSE(c.tensors.empty());
    nn::TransformerEncoderLayer layer(layer_options(c));
    EXPECT_EQ(layer.named_parameters().size(), 12u);
    check_encoder(layer, c, "src_mask");
  }
}

TEST(TransformerEncoder, MatchesPyTorch) {
  const GoldenCase& c = golden("encoder_two_layers_norm_causal");
  ASSERT_FALSE(c.tensors.empty());
  nn::TransformerEncoder encoder(nn::TransformerEncoderOptions(layer_options(c), c.int_param("layers")).norm(true));
  EXPECT_EQ(encoder.named_parameters().size(), 26u);
  check_encoder(encoder, c, "mask");
}

TEST(TransformerDecoderLayer, MatchesPyTorch) {
  const GoldenCase& c = golden("decoder_layer_post_norm_causal");
  ASSERT_FALSE(c.tensors.empty());
  nn::TransformerDecoderLayer layer(layer_options(c));
  EXPECT_EQ(layer.named_parameters().size(), 18u);
  check_decoder(layer, c);
}

TEST(TransformerDecoder, MatchesPyTorch) {
  const GoldenCase& c = golden("decoder_two_layers_pre_norm_gelu_batch_first");
  ASSERT_FALSE(c.tensors.empty());
  nn::TransformerDecoder decoder(nn::TransformerDecoderOptions(layer_options(c), c.int_param("layers")).norm(true));
  EXPECT_EQ(decoder.named_parameters().size(), 38u);
  check_decoder(decoder, c);
}

// A model of one's own on the layers: encoder and decoder of one layer each, learning to copy
// sequences of 6 tokens of 8 with teacher forcing (the decoder sees the sequence shifted right,
// causally). Holds that the layers train end to end, as a user would put them together.
class Copier : public nn::Module {
 public:
  explicit Copier(Generator& gen) {
    const auto layer = nn::TransformerLayerOptions(32, 4).dim_feedforward(64).dropout(0.f).batch_first(true);
    embed_ = register_module("embed", std::make_shared<nn::Embedding>(9, 32, gen));  // 8 tokens and a start
    encoder_ = register_module("encoder", std::make_shared<nn::TransformerEncoder>(
                                              nn::TransformerEncoderOptions(layer, 1), gen));
    decoder_ = register_module("decoder", std::make_shared<nn::TransformerDecoder>(
                                              nn::TransformerDecoderOptions(layer, 1), gen));
    head_ = register_module("head", std::make_shared<nn::Linear>(32, 8, true, gen));
  }
  // Logits (N, T, 8) of each next token.
  Variable forward(const Variable& src, const Variable& shifted) {
    const Variable memory = encoder_->forward(embed_->forward(src));
    return head_->forward(decoder_->forward(embed_->forward(shifted), memory, Tensor(), Tensor(), Tensor(),
                                            Tensor(), true));
  }

 private:
  std::shared_ptr<nn::Embedding> embed_;
  std::shared_ptr<nn::TransformerEncoder> encoder_;
  std::shared_ptr<nn::TransformerDecoder> decoder_;
  std::shared_ptr<nn::Linear> head_;
};

TEST(Transformer, AnEncoderAndDecoderLearnToCopy) {
  Generator gen(21);
  Copier model(gen);
  std::vector<std::int64_t> src, shifted;
  std::vector<std::int32_t> targets;
  for (int b = 0; b < 16; ++b)
    for (int t = 0; t < 6; ++t) {
      const auto token = static_cast<std::int64_t>(gen.next_u64() % 8);
      src.push_back(token);
      targets.push_back(static_cast<std::int32_t>(token));
      shifted.push_back(t == 0 ? 8 : src[src.size() - 2]);
    }
  const Variable x(Tensor::from_vector(src, {16, 6})), y_in(Tensor::from_vector(shifted, {16, 6}));
  const Tensor y = Tensor::from_vector(targets, {16 * 6});
  optim::AdamW opt(optim::AdamWOptions(1e-2f).weight_decay(0.f));
  opt.setup(model);
  float first = 0.f, last = 0.f;
  for (int step = 0; step < 60; ++step) {
    model.zero_grad();
    const Variable loss = softmax_cross_entropy(reshape(model.forward(x, y_in), {16 * 6, 8}), y);
    loss.backward();
    opt.update();
    (step == 0 ? first : last) = loss.item();
  }
  // 2.46 -> 0.008 here. Without the cross-attention's view of the source the decoder can only
  // guess (the tokens are random): the loss would stay near ln 8 = 2.08.
  EXPECT_GT(first, 1.5f);
  EXPECT_LT(last, 0.1f);
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
                   HasSubstr("TransformerEncoder: expected num_layers >= 1, got 0"));
  DPL_EXPECT_ERROR(nn::TransformerDecoderLayer(Options(8, 2).layer_norm_eps(0.0)),
                   HasSubstr("TransformerDecoderLayer: expected layer_norm_eps > 0, got 0"));
  DPL_EXPECT_ERROR(nn::TransformerDecoder(nn::TransformerDecoderOptions(Options(8, 2), 0)),
                   HasSubstr("TransformerDecoder: expected num_layers >= 1, got 0"));
}

}  // namespace
}  // namespace dpl
