// reshape and flatten: forward values, gradients against finite differences, and a channels-last
// input (tests/support/memory_formats.hpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "dpl/dpl.hpp"
#include "support/gradcheck.hpp"
#include "support/memory_formats.hpp"

namespace dpl {
namespace {

using ::testing::ElementsAre;
using test::gradcheck;
using test::expect_same_values;
using test::FormatRun;
using test::is_nhwc;
using test::run_both;

using Vars = std::vector<Variable>;

Tensor randn(const Shape& shape, Generator& gen, float stddev = 1.f) { return Tensor::normal(shape, 0.f, stddev, gen); }

TEST(OpsForward, ReluReshapeFlatten) {
  const Variable x(Tensor::from_vector<float>({-1, 0, 2, -3, 4, 0.5f}, {2, 3}));
  EXPECT_THAT(relu(x).data().to_vector<float>(), ElementsAre(0, 0, 2, 0, 4, 0.5f));
  const Variable r = reshape(x, {3, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_THAT(r.data().to_vector<float>(), ElementsAre(-1, 0, 2, -3, 4, 0.5f));
  EXPECT_EQ(flatten(Variable(Tensor::zeros({2, 1, 2, 3}))).shape(), (Shape{2, 6}));
  EXPECT_EQ(flatten(Variable(Tensor::zeros({2, 1, 2, 3})), 2).shape(), (Shape{2, 1, 6}));
}

TEST(OpsGradient, ReshapeAndFlatten) {
  Generator gen(17);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return reshape(v[0], {4, -1}); }, {randn({2, 3, 4}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return flatten(v[0]); }, {randn({2, 3, 2}, gen)}));
  // A reshape followed by an op that is sensitive to layout (a row broadcast) checks that the
  // gradient comes back in the input's element order.
  EXPECT_TRUE(gradcheck([](const Vars& v) { return mul(reshape(v[0], {3, 2}), v[1]); },
                        {randn({2, 3}, gen), randn({2}, gen)}));
}

TEST(MemoryFormat, ReshapeAndRowBroadcastOfAChannelsLastTensor) {
  Generator gen(8);
  const Tensor bias = Tensor::uniform({5}, -1.f, 1.f, gen);
  const Tensor row = Tensor::uniform({60}, -1.f, 1.f, gen);
  run_both([&](const Variable& x, const Variable& y) {
    return add(flatten(x * y, 1), Variable(row)) +
           flatten(add(x, Variable(bias)), 1);  // (2, 3, 4, 5) + (5,): broadcast over rows
  });
}

}  // namespace
}  // namespace dpl
