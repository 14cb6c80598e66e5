// matmul and linear: forward values by hand, gradients against finite differences
// (tests/support/gradcheck.hpp), and a small network of them end to end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "dpl/dpl.hpp"
#include "support/gradcheck.hpp"

namespace dpl {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;
using test::away_from_zero;
using test::gradcheck;

using Vars = std::vector<Variable>;

Tensor randn(const Shape& shape, Generator& gen, float stddev = 1.f) { return Tensor::normal(shape, 0.f, stddev, gen); }

TEST(OpsForward, Matmul) {
  const Variable a(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  const Variable b(Tensor::from_vector<float>({7, 8, 9, 10, 11, 12}, {3, 2}));
  const Variable y = matmul(a, b);
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_THAT(y.data().to_vector<float>(), ElementsAre(58, 64, 139, 154));
}

TEST(OpsForward, LinearWithAndWithoutBias) {
  const Variable x(Tensor::from_vector<float>({1, 2, -1, 3}, {2, 2}));
  const Variable w(Tensor::from_vector<float>({1, 0, 0, 1, 2, -1}, {3, 2}));
  const Variable b(Tensor::from_vector<float>({10, 20, 30}, {3}));
  EXPECT_THAT(linear(x, w, b).data().to_vector<float>(), ElementsAre(11, 22, 30, 9, 23, 25));
  EXPECT_THAT(linear(x, w).data().to_vector<float>(), ElementsAre(1, 2, 0, -1, 3, -5));
}

TEST(OpsGradient, Matmul) {
  Generator gen(10);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return matmul(v[0], v[1]); }, {randn({3, 4}, gen), randn({4, 5}, gen)}));
  // A square product of a variable with itself exercises two gradients into one leaf.
  EXPECT_TRUE(gradcheck([](const Vars& v) { return matmul(v[0], v[0]); }, {randn({3, 3}, gen)}));
}

TEST(OpsGradient, LinearWithBias) {
  Generator gen(11);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return linear(v[0], v[1], v[2]); },
                        {randn({5, 3}, gen), randn({4, 3}, gen), randn({4}, gen)}));
}

TEST(OpsGradient, LinearWithoutBias) {
  Generator gen(12);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return linear(v[0], v[1]); }, {randn({5, 3}, gen), randn({4, 3}, gen)}));
}

TEST(OpsGradient, SmallNetworkEndToEnd) {
  Generator gen(20);
  const Tensor labels = Tensor::from_vector<std::int32_t>({1, 0, 2, 1}, {4});
  const auto net = [&](const Vars& v) {
    const Variable h = relu(linear(v[0], v[1], v[2]));
    return softmax_cross_entropy(linear(h, v[3], v[4]), labels);
  };
  // Large enough hidden pre-activations keep the relu kinks out of the finite-difference step.
  EXPECT_TRUE(gradcheck(net, {away_from_zero({4, 3}, gen, 0.5f, 1.f), randn({6, 3}, gen), away_from_zero({6}, gen),
                              randn({3, 6}, gen), randn({3}, gen)}));
}

}  // namespace
}  // namespace dpl
