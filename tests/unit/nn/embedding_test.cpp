// nn::Embedding: PyTorch's parameter name, shape and initialisation, the padding row, forward on
// int64 and int32 ids of any shape, the gradient's scatter-add, its Options, and bad ids.
// (Against PyTorch's own outputs and state_dict: tests/unit/autograd/ops/shape_golden_test.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"

namespace dpl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Embedding, NameShapeAndPyTorchsInitialisation) {
  Generator gen(5);
  nn::Embedding emb(nn::EmbeddingOptions(400, 50).padding_idx(-2), gen);
  const auto named = emb.named_parameters();
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].first, "weight");
  EXPECT_EQ(emb.weight().shape(), (Shape{400, 50}));
  // N(0, 1): over 19950 draws the mean is within 0.03 and the deviation within 0.03 of 1.
  const std::vector<float> w = emb.weight().data().to_vector<float>();
  double s = 0, s2 = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (i / 50 == 398) continue;
    s += w[i];
    s2 += static_cast<double>(w[i]) * w[i];
  }
  const double n = static_cast<double>(w.size() - 50), mean = s / n;
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(std::sqrt(s2 / n - mean * mean), 1.0, 0.03);
  // The padding row (-2 counts from the end: row 398) starts at zero.
  for (std::size_t k = 0; k < 50; ++k) EXPECT_EQ(w[398 * 50 + k], 0.f);
  EXPECT_EQ(emb.options().padding_idx(), -2);
}

TEST(Embedding, OptionsMatchThePositionalConstructor) {
  Generator g1(3), g2(3);
  nn::Embedding a(7, 3, g1), b(nn::EmbeddingOptions(7, 3), g2);
  EXPECT_EQ(a.weight().data().to_vector<float>(), b.weight().data().to_vector<float>());
  EXPECT_FALSE(a.options().padding_idx().has_value());
  EXPECT_EQ(nn::EmbeddingOptions(7, 3).padding_idx(2).num_embeddings(), 7);
}

TEST(Embedding, ForwardPicksRowsForIdsOfAnyShapeAndBothIndexTypes) {
  nn::Embedding emb(4, 2);
  Tensor w = emb.weight().data();
  w.copy_(Tensor::arange(0, 8).reshape({4, 2}));
  const Variable y64 = emb(Variable(Tensor::from_vector<std::int64_t>({3, 0, 3, 1, 2, 2}, {2, 1, 3})));
  EXPECT_EQ(y64.shape(), (Shape{2, 1, 3, 2}));
  EXPECT_THAT(y64.data().to_vector<float>(), ElementsAre(6, 7, 0, 1, 6, 7, 2, 3, 4, 5, 4, 5));
  const Variable y32 = emb(Variable(Tensor::from_vector<std::int32_t>({1}, {1})));
  EXPECT_THAT(y32.data().to_vector<float>(), ElementsAre(2, 3));
}

TEST(Embedding, GradientAddsRepeatedIdsAndSkipsThePaddingRow) {
  nn::Embedding emb(nn::EmbeddingOptions(4, 2).padding_idx(0));
  emb.zero_grad();
  const Variable y = emb(Variable(Tensor::from_vector<std::int64_t>({2, 0, 2, 3}, {4})));
  sum(mul(y, Variable(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2})))).backward();
  EXPECT_THAT(emb.weight().grad().to_vector<float>(), ElementsAre(0, 0, 0, 0, 6, 8, 7, 8));
  // A second pass accumulates, as every parameter's gradient does.
  sum(emb(Variable(Tensor::from_vector<std::int64_t>({1}, {1})))).backward();
  EXPECT_THAT(emb.weight().grad().to_vector<float>(), ElementsAre(0, 0, 1, 1, 6, 8, 7, 8));
}

TEST(Embedding, BadSettingsAndIdsAreRefused) {
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message([] { nn::Embedding(0, 3); }), HasSubstr("expected num_embeddings >= 1"));
  EXPECT_THAT(message([] { nn::Embedding(nn::EmbeddingOptions(3, 2).padding_idx(3)); }),
              HasSubstr("padding_idx 3 is out of range for 3 embeddings"));
  nn::Embedding emb(3, 2);
  EXPECT_THAT(message([&] { emb(Variable(Tensor::from_vector<std::int64_t>({0, 5}, {2}))); }),
              HasSubstr("index 5 is out of range for a dimension of extent 3"));
  EXPECT_THAT(message([&] { emb(Variable(Tensor::from_vector<float>({0, 1}, {2}))); }),
              HasSubstr("expected an index of dtype int64 or int32, got float32"));
}

}  // namespace
}  // namespace dpl
