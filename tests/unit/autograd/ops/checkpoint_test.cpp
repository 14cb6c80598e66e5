// Activation checkpointing: the same loss and gradients as without it, dropout masks replayed,
// batch norm's running statistics and count updated once, hooks run once, refusals; and
// backward from a variable of any shape with a given gradient, which it rests on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/graph_nodes.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<float> values_of(const Tensor& t) {
  if (t.dtype() == kInt64) {  // a batch count
    std::vector<float> out;
    for (std::int64_t v : t.contiguous().to_vector<std::int64_t>()) out.push_back(static_cast<float>(v));
    return out;
  }
  return t.contiguous().to(kFloat32).to_vector<float>();
}

// A block with parameters, a batch norm and dropout: what a user checkpoints.
struct Block : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::BatchNorm1d> bn;
  std::shared_ptr<nn::Dropout> drop;
  explicit Block(Generator& gen) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 8, true, gen));
    bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(8));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.25f));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 6, true, gen));
  }
  Variable forward(const Variable& x) override {
    return fc2->forward(drop->forward(relu(bn->forward(fc1->forward(x)))));
  }
};

// One training step of two blocks (the first checkpointed when `checkpointed`) on x: the input's
// gradient, then every parameter's gradient, then every buffer, in order.
std::vector<std::vector<float>> step(bool checkpointed) {
  Generator init(7);
  auto first = std::make_shared<Block>(init), second = std::make_shared<Block>(init);
  manual_seed(11);
  Variable x(Tensor::uniform({5, 6}, -1.f, 1.f, init), true);
  const Variable h = checkpointed ? checkpoint([&](const Variable& in) { return first->forward(in); }, x)
                                  : first->forward(x);
  const Variable loss = sum(mul(second->forward(h), second->forward(h)));
  loss.backward();
  std::vector<std::vector<float>> out{values_of(x.grad())};
  for (const auto& m : {first, second}) {
    for (const Variable& p : m->parameters()) out.push_back(values_of(p.grad()));
    for (const auto& [name, b] : m->named_buffers()) out.push_back(values_of(b.data()));
  }
  out.push_back({static_cast<float>(default_generator().next_u64() % 1000003)});  // where the generator ended
  return out;
}

TEST(ActivationCheckpoint, GivesTheGradientsAndStatisticsOfThePlainStep) {
  const auto plain = step(false), checkpointed = step(true);
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(plain[i], checkpointed[i]) << "entry " << i;
}

// Two processes that hold the same batch, for a synchronised batch norm in one process.
class TwinProcess final : public nn::CrossProcessSum {
 public:
  void sum(Tensor& buffer) override { buffer.copy_(buffer * 2.f); }
  int processes() const override { return 2; }
};

// A synchronised batch norm updates its running statistics and count once; its recomputation
// shifts its sums by the updated running mean, so the gradients agree to rounding.
TEST(ActivationCheckpoint, SynchronisedBatchNormCountsTheBatchOnce) {
  std::vector<std::vector<float>> results[2];
  for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
    Generator gen(3);
    nn::BatchNorm2d bn(4);
    bn.synchronize_statistics(std::make_shared<TwinProcess>());
    Variable x(Tensor::uniform({2, 4, 3, 3}, 1.f, 3.f, gen), true);
    const Tensor w = Tensor::uniform({2, 4, 3, 3}, -1.f, 1.f, gen);
    const auto f = [&](const Variable& in) { return bn.forward(in); };
    const Variable y = checkpointed == 1 ? checkpoint(f, x) : f(x);
    sum(mul(y, Variable(w))).backward();
    results[checkpointed] = {values_of(x.grad()), values_of(bn.running_mean()), values_of(bn.running_var()),
                             values_of(bn.num_batches_tracked())};
  }
  for (std::size_t i = 1; i < 4; ++i) EXPECT_EQ(results[1][i], results[0][i]) << "buffer " << i;
  ASSERT_EQ(results[1][0].size(), results[0][0].size());
  for (std::size_t k = 0; k < results[0][0].size(); ++k) EXPECT_NEAR(results[1][0][k], results[0][0][k], 1e-5f) << k;
  EXPECT_EQ(results[1][3], std::vector<float>{1.f});
}

// A Sequential cut into runs: the gradients of the plain chain, one checkpoint node a run but the
// last, and the run lengths PyTorch's checkpoint_sequential would not refuse.
TEST(ActivationCheckpoint, SequentialInRunsGivesTheChainsGradients) {
  for (std::int64_t segments : {1, 2, 3, 5}) {
    std::vector<std::vector<float>> results[2];
    for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
      Generator gen(9);
      nn::Sequential seq(nn::Linear(3, 5, true, gen), nn::ReLU(), nn::Linear(5, 5, true, gen), nn::ReLU(),
                         nn::Linear(5, 2, true, gen));
      Variable x(Tensor::uniform({4, 3}, -1.f, 1.f, gen), true);
      const Variable y = checkpointed == 1 ? seq.forward_checkpointed(segments, x) : seq.forward(x);
      EXPECT_EQ(test::nodes_named(y, "checkpoint"), checkpointed == 1 ? segments - 1 : 0) << segments;
      sum(mul(y, y)).backward();
      results[checkpointed].push_back(values_of(x.grad()));
      for (const Variable& p : seq.parameters()) results[checkpointed].push_back(values_of(p.grad()));
    }
    EXPECT_EQ(results[1], results[0]) << segments << " segments";
  }
  nn::Sequential seq{nn::ReLU{}, nn::ReLU{}};
  const Variable x(Tensor::ones({2}), true);
  DPL_EXPECT_ERROR(seq.forward_checkpointed(0, x),
                   HasSubstr("expected 1 <= segments <= 2 (the number of modules), got 0"));
  DPL_EXPECT_ERROR(seq.forward_checkpointed(3, x), HasSubstr("got 3"));
}

TEST(ActivationCheckpoint, KeepsOnlyItsInputsAndRecomputesInBackward) {
  Variable x(Tensor::uniform({4, 3}, -1.f, 1.f), true);
  int runs = 0;
  const Variable y = checkpoint(
      [&](const Variable& in) {
        ++runs;
        EXPECT_EQ(recomputing(), runs == 2);
        return relu(mul(in, in));
      },
      x);
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(recomputing());
  ASSERT_NE(y.creator(), nullptr);
  EXPECT_STREQ(y.creator()->name(), "checkpoint");
  // The function's own ops are not in the graph: the checkpoint's only input is x.
  ASSERT_EQ(y.creator()->inputs().size(), 1u);
  EXPECT_EQ(y.creator()->inputs()[0].id(), x.id());
  sum(y).backward();
  EXPECT_EQ(runs, 2);
  const std::vector<float> xv = values_of(x.data()), g = values_of(x.grad());
  for (std::size_t i = 0; i < xv.size(); ++i) EXPECT_FLOAT_EQ(g[i], 2.f * xv[i]) << i;
}

TEST(ActivationCheckpoint, ParametersGetGradientsWhenNoInputRequiresOne) {
  nn::Linear fc(3, 2);
  const Variable x(Tensor::ones({4, 3}));
  int hooks = 0;
  fc.parameters()[0].add_gradient_ready_hook(&hooks, [&] { ++hooks; });
  sum(checkpoint([&](const Variable& in) { return fc.forward(in); }, x)).backward();
  ASSERT_TRUE(fc.parameters()[0].grad().defined());
  for (float g : values_of(fc.parameters()[0].grad())) EXPECT_FLOAT_EQ(g, 4.f);
  for (float g : values_of(fc.parameters()[1].grad())) EXPECT_FLOAT_EQ(g, 4.f);
  EXPECT_EQ(hooks, 1);
  EXPECT_FALSE(x.grad().defined());
}

TEST(ActivationCheckpoint, SeveralInputsAnInputUsedTwiceAndAnUnusedOne) {
  Variable a(Tensor::full({3}, 2.f), true), b(Tensor::full({3}, 5.f), true), unused(Tensor::ones({3}), true);
  const Variable y =
      checkpoint([](const std::vector<Variable>& in) { return mul(in[0], in[1]); }, {a, b, a, unused});
  sum(y).backward();
  // y = a * b with the function's inputs (a, b, a, unused): only its first two count.
  for (float g : values_of(a.grad())) EXPECT_FLOAT_EQ(g, 5.f);
  for (float g : values_of(b.grad())) EXPECT_FLOAT_EQ(g, 2.f);
  ASSERT_TRUE(unused.grad().defined());
  for (float g : values_of(unused.grad())) EXPECT_FLOAT_EQ(g, 0.f);
}

TEST(ActivationCheckpoint, WithoutRecordingItIsTheFunction) {
  Variable x(Tensor::ones({2}), true);
  NoGradGuard guard;
  int runs = 0;
  const Variable y = checkpoint(
      [&](const Variable& in) {
        ++runs;
        return mul(in, in);
      },
      x);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(y.creator(), nullptr);
}

TEST(ActivationCheckpoint, RefusesWhatItCannotRecompute) {
  Variable x(Tensor::ones({2, 2}), true);
  DPL_EXPECT_ERROR(checkpoint(CheckpointFunction(), {x}), HasSubstr("expected a callable function"));
  DPL_EXPECT_ERROR(checkpoint([](const Variable& in) { return in; }, Variable()),
                   HasSubstr("expected defined inputs, got an undefined one at position 0"));
  DPL_EXPECT_ERROR(checkpoint([](const Variable&) { return Variable(); }, x),
                   HasSubstr("the function returned an undefined variable"));
  // A function that computes something else the second time: backward says so.
  int runs = 0;
  const Variable y = checkpoint(
      [&](const Variable& in) { return ++runs == 1 ? mul(in, in) : reshape(mul(in, in), {4}); }, x);
  DPL_EXPECT_ERROR(sum(y).backward(), AllOf(HasSubstr("checkpoint: the function computed again in backward gave "
                                                      "shape (4,)"),
                                            HasSubstr("but shape (2, 2)"), HasSubstr("must compute the same")));
  EXPECT_FALSE(recomputing());
}

TEST(Backward, FromAVariableOfAnyShapeWithAGivenGradient) {
  Variable x(Tensor::full({2, 3}, 3.f), true);
  const Variable y = mul(x, x);
  y.backward(Tensor::full({2, 3}, 0.5f));
  for (float g : values_of(x.grad())) EXPECT_FLOAT_EQ(g, 3.f);  // 0.5 * 2x
  Variable z(Tensor::ones({2}), true);
  DPL_EXPECT_ERROR(mul(z, z).backward(Tensor::ones({3})),
                   AllOf(HasSubstr("expected a gradient of the variable's shape (2,)"), HasSubstr("got shape (3,)")));
  DPL_EXPECT_ERROR(mul(z, z).backward(Tensor()), HasSubstr("got an undefined tensor"));
}

TEST(Backward, EnableGradGuardRecordsInsideANoGradGuard) {
  Variable x(Tensor::ones({2}), true);
  NoGradGuard off;
  EXPECT_FALSE(grad_enabled());
  {
    EnableGradGuard on;
    EXPECT_TRUE(grad_enabled());
    EXPECT_NE(mul(x, x).creator(), nullptr);
  }
  EXPECT_FALSE(grad_enabled());
}

}  // namespace
}  // namespace dpl
