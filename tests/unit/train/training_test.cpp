// End to end: a small MLP learns a problem no linear model can, through modules, autograd, the
// arenas and an optimizer together.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "dpl/dpl.hpp"

namespace dpl {
namespace {

// XOR of the signs: four clusters around (+-1, +-1), label 1 where the signs differ.
struct Problem {
  Tensor x, labels;
};

Problem xor_clusters(std::int64_t per_cluster, Generator& gen) {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  const float centres[4][2] = {{1, 1}, {-1, -1}, {1, -1}, {-1, 1}};
  for (int c = 0; c < 4; ++c) {
    for (std::int64_t i = 0; i < per_cluster; ++i) {
      x.push_back(centres[c][0] + gen.normal(0.f, 0.15f));
      x.push_back(centres[c][1] + gen.normal(0.f, 0.15f));
      y.push_back(c < 2 ? 0 : 1);
    }
  }
  const std::int64_t n = 4 * per_cluster;
  return {Tensor::from_vector(x, {n, 2}), Tensor::from_vector(y, {n})};
}

TEST(Training, MlpLearnsXorClusters) {
  Generator gen(123);
  const Problem data = xor_clusters(16, gen);
  nn::Sequential model{std::make_shared<nn::Linear>(2, 16, true, gen), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(16, 2, true, gen)};
  optim::Adam opt(0.05f);
  opt.setup(model);
  const Variable x(data.x);
  const auto loss_fn = [&] { return softmax_cross_entropy(model(x), data.labels); };

  const float initial = loss_fn().item();
  float loss = initial;
  for (int step = 0; step < 300 && loss >= 1e-3f; ++step) loss = opt.update(loss_fn).item();

  // loss is the value before the last update; evaluate the trained model once more.
  NoGradGuard no_grad;
  const Variable logits = model(x);
  const float final_loss = softmax_cross_entropy(logits, data.labels).item();
  EXPECT_GT(initial, 0.5f);
  EXPECT_LT(final_loss, 0.01f);
  EXPECT_FLOAT_EQ(accuracy(logits, data.labels).item(), 1.f);
}

TEST(Training, MlpOnFreshPointsOfTheSameProblem) {
  // The decision regions are quadrants, so a model trained on one sample classifies another.
  Generator gen(7);
  const Problem train = xor_clusters(16, gen);
  const Problem held_out = xor_clusters(25, gen);
  nn::MLP model(16, 2, 2, gen);
  optim::MomentumSGD opt(0.1f, 0.9f);
  opt.setup(model);
  for (int step = 0; step < 200; ++step)
    opt.update([&] { return softmax_cross_entropy(model(Variable(train.x)), train.labels); });
  NoGradGuard no_grad;
  model.eval();
  const Variable logits = model(Variable(held_out.x));
  EXPECT_FLOAT_EQ(accuracy(logits, held_out.labels).item(), 1.f);
  EXPECT_LT(softmax_cross_entropy(logits, held_out.labels).item(), 0.05f);
}

}  // namespace
}  // namespace dpl
