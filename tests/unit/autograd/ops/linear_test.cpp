// matmul, bmm and linear: forward values by hand, gradients against finite differences
// (tests/support/gradcheck.hpp) for every rank matmul takes, bad inputs, and a small network of
// them end to end. gelu_mlp: finite differences, and the values and gradients of the ops it fuses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
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

TEST(OpsForward, MatmulOfEveryRankAgainstLoopsOfTheTwoDimensionalProduct) {
  Generator gen(40);
  const Tensor a = randn({2, 1, 3, 4}, gen), b = randn({5, 4, 2}, gen);
  const Variable y = matmul(Variable(a), Variable(b));
  ASSERT_EQ(y.shape(), (Shape{2, 5, 3, 2}));
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 5; ++j) {
      const Variable want =
          matmul(Variable(a.narrow(0, i, 1).reshape({3, 4})), Variable(b.narrow(0, j, 1).reshape({4, 2})));
      const Tensor got = y.data().narrow(0, i, 1).narrow(1, j, 1).contiguous().reshape({3, 2});
      EXPECT_THAT(got.to_vector<float>(), Pointwise(FloatNear(1e-6f), want.data().to_vector<float>()));
    }
  const Variable v(Tensor::from_vector<float>({1, 2, 3}, {3}));
  const Variable m(Tensor::from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2}));
  const Variable dot = matmul(v, v);
  EXPECT_EQ(dot.shape(), Shape{});
  EXPECT_EQ(dot.data().item(), 14.f);
  EXPECT_THAT(matmul(v, m).data().to_vector<float>(), ElementsAre(4, 5));
  EXPECT_EQ(matmul(v, m).shape(), (Shape{2}));
  EXPECT_THAT(matmul(transpose(m, 0, 1), v).data().to_vector<float>(), ElementsAre(4, 5));
  EXPECT_EQ(matmul(Variable(Tensor::zeros({4, 2, 3})), v).shape(), (Shape{4, 2}));
  EXPECT_EQ(matmul(v, Variable(Tensor::zeros({4, 3, 5}))).shape(), (Shape{4, 5}));
  EXPECT_EQ(matmul(Variable(Tensor::zeros({4, 2, 3})), m).shape(), (Shape{4, 2, 2}));
  EXPECT_EQ(bmm(Variable(Tensor::zeros({4, 2, 3})), Variable(Tensor::zeros({4, 3, 5}))).shape(), (Shape{4, 2, 5}));
  EXPECT_EQ(linear(Variable(Tensor::zeros({2, 3, 2})), Variable(Tensor::zeros({5, 2}))).shape(), (Shape{2, 3, 5}));
}

TEST(OpsGradient, MatmulOfEveryRankAndBmm) {
  Generator gen(41);
  const auto product = [](const Vars& v) { return matmul(v[0], v[1]); };
  EXPECT_TRUE(gradcheck(product, {randn({2, 1, 3, 4}, gen), randn({3, 4, 2}, gen)}));  // broadcast batches
  EXPECT_TRUE(gradcheck(product, {randn({2, 3, 4}, gen), randn({4, 5}, gen)}));        // folded batch
  EXPECT_TRUE(gradcheck(product, {randn({3, 4}, gen), randn({2, 4, 2}, gen)}));        // broadcast first operand
  EXPECT_TRUE(gradcheck(product, {randn({4}, gen), randn({2, 4, 3}, gen)}));
  EXPECT_TRUE(gradcheck(product, {randn({2, 3, 4}, gen), randn({4}, gen)}));
  EXPECT_TRUE(gradcheck(product, {randn({4}, gen), randn({4}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return bmm(v[0], v[1]); }, {randn({3, 2, 4}, gen), randn({3, 4, 2}, gen)}));
  // Transposed operands go to the GEMM as they lie in memory (its transpose flags), not copied.
  EXPECT_TRUE(gradcheck([](const Vars& v) { return bmm(v[0], transpose(v[0], 1, 2)); }, {randn({2, 3, 4}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return bmm(transpose(v[0], 1, 2), transpose(v[1], 1, 2)); },
                        {randn({3, 4, 2}, gen), randn({3, 5, 4}, gen)}));
  // Attention's scores, q k^T over (batch, heads) with k transposed as a view.
  EXPECT_TRUE(gradcheck([](const Vars& v) { return matmul(v[0], transpose(v[1], -2, -1)); },
                        {randn({2, 2, 3, 4}, gen), randn({2, 2, 5, 4}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return linear(v[0], v[1], v[2]); },
                        {randn({2, 3, 4}, gen), randn({5, 4}, gen), randn({5}, gen)}));
}

TEST(OpsForward, BatchedMatmulInSixteenBitTypesRoundsTheFloat32Product) {
  Generator gen(42);
  // Multiples of 1/8 in [-1, 1] with an inner extent of 4: every product and sum is exact in
  // float32, so the 16-bit result is the float32 one rounded once.
  const auto eighths = [&](const Shape& s) {
    Tensor t = Tensor::uniform(s, -8.f, 8.f, gen);
    float* p = t.data<float>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = std::round(p[i]) / 8.f;
    return t;
  };
  const Tensor a = eighths({2, 1, 3, 4}), b = eighths({3, 4, 2});
  const Tensor want = matmul(Variable(a), Variable(b)).data();
  for (DType dt : {kBFloat16, kFloat16}) {
    const Tensor got = matmul(Variable(a.to(dt)), Variable(b.to(dt))).data();
    EXPECT_EQ(got.dtype(), dt);
    EXPECT_EQ(got.to(kFloat32).to_vector<float>(), want.to(dt).to(kFloat32).to_vector<float>()) << dtype_name(dt);
  }
}

// Runs op and expects a dpl::Error whose message holds part.
template <typename Op>
void expect_error(Op&& op, const std::string& part) {
  try {
    op();
    ADD_FAILURE() << "expected dpl::Error holding \"" << part << "\"";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr(part));
  }
}

TEST(OpsErrors, MatmulAndBmmRefuseOperandsThatDoNotFit) {
  const Variable a(Tensor::zeros({2, 3, 4})), b(Tensor::zeros({3, 5, 2}));
  expect_error([&] { matmul(a, b); }, "inner extents differ: (2, 3, 4) x (3, 5, 2)");
  expect_error([&] { matmul(a, Variable(Tensor::zeros({3, 4, 2}))); }, "do not broadcast (extents 2 and 3)");
  expect_error([&] { matmul(Variable(Tensor::zeros({3})), Variable(Tensor::zeros({4}))); }, "inner extents differ");
  expect_error([&] { bmm(a, Variable(Tensor::zeros({3, 4, 2}))); }, "batch extents differ");
  expect_error([&] { bmm(a, Variable(Tensor::zeros({4, 2}))); }, "with 3 dimensions");
  expect_error([&] { linear(a, Variable(Tensor::zeros({5, 3}))); }, "expected an input of shape (..., 3)");
}

// --- gelu_mlp ---------------------------------------------------------------------------------

Variable composed_mlp(const Vars& v) {
  return linear(gelu(linear(v[0], v[1], v[2]), GeluApproximation::kTanh), v[3], v[4]);
}

TEST(OpsGradient, GeluMlp) {
  Generator gen(30);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return gelu_mlp(v[0], v[1], v[2], v[3], v[4]); },
                        {randn({2, 3, 4}, gen), randn({6, 4}, gen), randn({6}, gen), randn({5, 6}, gen),
                         randn({5}, gen)}));
}

// The fused op against the composition it stands for: output and all five gradients, written
// fresh and then accumulated by a second backward. float32 differs only in the order of sums; in
// bfloat16 the composition also rounds the hidden layer before the activation and the hidden
// gradient before the derivative, which the fused op keeps in float32: about an ulp of each result.
TEST(OpsForward, GeluMlpEqualsTheOpsItFuses) {
  Generator gen(31);
  const std::vector<Shape> shapes = {{3, 5, 8}, {16, 8}, {16}, {8, 16}, {8}};
  std::vector<Tensor> values;
  for (const Shape& s : shapes) values.push_back(randn(s, gen));
  const Tensor w = randn({3, 5, 8}, gen);
  for (DType dt : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Vars fused, composed;
    for (const Tensor& v : values) {
      fused.emplace_back(v.to(dt), true);
      composed.emplace_back(v.to(dt).clone(), true);
    }
    // Absolute tolerances, a fraction of each result's largest value: float32 1e-5, bfloat16 2^-5.
    const auto near = [dt](const Tensor& want) {
      const std::vector<float> w = want.to(kFloat32).to_vector<float>();
      float largest = 0.f;
      for (float v : w) largest = std::max(largest, std::fabs(v));
      return Pointwise(FloatNear((dt == kFloat32 ? 1e-5f : 1.f / 32) * std::max(largest, 1.f)), w);
    };
    for (int pass = 0; pass < 2; ++pass) {
      const Variable y = gelu_mlp(fused[0], fused[1], fused[2], fused[3], fused[4]);
      const Variable yr = composed_mlp(composed);
      ASSERT_EQ(y.shape(), (Shape{3, 5, 8}));
      EXPECT_THAT(y.data().to(kFloat32).to_vector<float>(), near(yr.data().contiguous()));
      sum(mul(y, Variable(w.to(dt)))).backward();
      sum(mul(yr, Variable(w.to(dt)))).backward();
      for (std::size_t i = 0; i < fused.size(); ++i)
        EXPECT_THAT(fused[i].grad().to(kFloat32).to_vector<float>(), near(composed[i].grad()))
            << "gradient of input " << i << " after " << pass + 1 << " backward passes";
    }
  }
}

TEST(OpsForward, GeluMlpWithoutABiasIsTheComposition) {
  Generator gen(32);
  const Variable x(randn({4, 6}, gen)), w1(randn({10, 6}, gen)), w2(randn({3, 10}, gen)), b2(randn({3}, gen));
  EXPECT_EQ(gelu_mlp(x, w1, Variable(), w2, b2).data().to_vector<float>(),
            composed_mlp({x, w1, Variable(), w2, b2}).data().to_vector<float>());
}

TEST(OpsForward, GeluMlpRefusesMismatchedShapes) {
  const Variable x(Tensor::zeros({4, 6})), w1(Tensor::zeros({10, 6})), b1(Tensor::zeros({10})),
      w2(Tensor::zeros({3, 10})), b2(Tensor::zeros({3}));
  expect_error([&] { gelu_mlp(Variable(Tensor::zeros({4, 5})), w1, b1, w2, b2); },
               "gelu_mlp: expected an input of shape (..., 6) for a first weight of shape (10, 6), got (4, 5)");
  expect_error([&] { gelu_mlp(x, w1, b1, Variable(Tensor::zeros({3, 9})), b2); },
               "expected a second weight of shape (out, 10) for a first weight of shape (10, 6), got (3, 9)");
  expect_error([&] { gelu_mlp(x, w1, Variable(Tensor::zeros({9})), w2, b2); },
               "expected a first bias of shape (10,), got (9,)");
  expect_error([&] { gelu_mlp(x, w1, b1, w2, Variable(Tensor::zeros({4}))); },
               "expected a second bias of shape (3,), got (4,)");
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
