// The shape and indexing ops: forward values, views that share storage, gradients against finite
// differences, a channels-last input (tests/support/memory_formats.hpp), strided views fed into
// the other op families, and bad inputs with their messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
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

// --- views, joins, splits, padding (dpl/autograd/ops/shape.hpp) and indexing (indexing.hpp) -------

namespace dpl {
namespace {

using ::testing::HasSubstr;

Tensor arange_f(const Shape& shape) {
  return Tensor::arange(0, static_cast<double>(shape_numel(shape))).reshape(shape);
}

// Expects op to throw dpl::Error whose message holds `part`.
template <typename F>
void expect_error(F&& op, const std::string& part) {
  try {
    op();
    ADD_FAILURE() << "expected dpl::Error holding \"" << part << "\"";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr(part));
  }
}

TEST(ShapeViews, ShareTheInputsStorageWherePyTorchGivesViews) {
  const Variable x(arange_f({2, 3, 4}));
  const Tensor& t = x.data();
  const std::vector<std::pair<const char*, Variable>> views = {
      {"view", view(x, {6, 4})},
      {"reshape", reshape(x, {4, -1})},
      {"flatten", flatten(x)},
      {"transpose", transpose(x, 0, 2)},
      {"permute", permute(x, {1, 2, 0})},
      {"unsqueeze", unsqueeze(x, 1)},
      {"squeeze", squeeze(unsqueeze(x, -1))},
      {"narrow", narrow(x, 1, 1, 2)},
      {"slice", slice(x, 2, 0, 4, 2)},
      {"expand", expand(unsqueeze(x, 0), {5, 2, 3, 4})},
      {"contiguous", contiguous(x)},
      {"reshape of a transposed view that allows it", reshape(transpose(x, 1, 2), {2, 4, 3})},
  };
  for (const auto& [name, v] : views) EXPECT_TRUE(v.data().shares_storage_with(t)) << name;
  for (const Variable& piece : split(x, 2, 2)) EXPECT_TRUE(piece.data().shares_storage_with(t)) << "split";
  for (const Variable& piece : chunk(x, 3, 1)) EXPECT_TRUE(piece.data().shares_storage_with(t)) << "chunk";
  // A reshape the strides do not allow copies, as PyTorch's does.
  const Variable tr = transpose(x, 1, 2);
  EXPECT_FALSE(reshape(tr, {2, 12}).data().shares_storage_with(t));
  EXPECT_FALSE(contiguous(tr).data().shares_storage_with(t));
  EXPECT_TRUE(contiguous(tr).data().is_contiguous());
}

TEST(ShapeViews, ValuesFollowPyTorchsIndexing) {
  const Variable x(arange_f({2, 3, 4}));
  const Variable tr = transpose(x, 0, 2);
  EXPECT_EQ(tr.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(tr.data().at<float>({3, 1, 1}), x.data().at<float>({1, 1, 3}));
  const Variable p = permute(x, {1, 2, 0});
  EXPECT_EQ(p.shape(), (Shape{3, 4, 2}));
  EXPECT_EQ(p.data().at<float>({2, 3, 1}), x.data().at<float>({1, 2, 3}));
  EXPECT_THAT(contiguous(permute(Variable(arange_f({2, 3})), {1, 0})).data().to_vector<float>(),
              ElementsAre(0, 3, 1, 4, 2, 5));
  EXPECT_THAT(slice(Variable(arange_f({7})), 0, 1, -1, 2).data().to_vector<float>(), ElementsAre(1, 3, 5));
  EXPECT_THAT(narrow(Variable(arange_f({5})), 0, -3, 2).data().to_vector<float>(), ElementsAre(2, 3));
  EXPECT_EQ(squeeze(Variable(Tensor::zeros({1, 3, 1, 2}))).shape(), (Shape{3, 2}));
  EXPECT_EQ(squeeze(Variable(Tensor::zeros({1, 3, 1, 2})), 2).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(squeeze(Variable(Tensor::zeros({1, 3})), 1).shape(), (Shape{1, 3}));
  EXPECT_EQ(unsqueeze(Variable(Tensor::zeros({3, 2})), -1).shape(), (Shape{3, 2, 1}));
  EXPECT_THAT(contiguous(expand(Variable(arange_f({3, 1})), {2, -1, 2})).data().to_vector<float>(),
              ElementsAre(0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2));
  std::vector<std::int64_t> sizes;
  for (const Variable& piece : split(Variable(arange_f({7, 2})), 3)) sizes.push_back(piece.shape()[0]);
  EXPECT_THAT(sizes, ElementsAre(3, 3, 1));
  sizes.clear();
  for (const Variable& piece : chunk(Variable(arange_f({6})), 4)) sizes.push_back(piece.shape()[0]);
  EXPECT_THAT(sizes, ElementsAre(2, 2, 2));  // as PyTorch: ceil(6 / 4) = 2 per piece, three pieces
  const std::vector<Variable> parts = split(Variable(arange_f({2, 5})), {1, 4}, 1);
  EXPECT_THAT(contiguous(parts[1]).data().to_vector<float>(), ElementsAre(1, 2, 3, 4, 6, 7, 8, 9));
}

TEST(ShapeViews, WritingIntoAViewWritesIntoTheInput) {
  const Variable x(Tensor::zeros({3, 4}));
  Tensor col = narrow(transpose(x, 0, 1), 0, 2, 1).data();  // x[:, 2] as a (1, 3) view
  col.fill_(7.0);
  EXPECT_THAT(x.data().to_vector<float>(), ElementsAre(0, 0, 7, 0, 0, 0, 7, 0, 0, 0, 7, 0));
}

TEST(ShapeGradient, EveryViewOp) {
  Generator gen(31);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return view(v[0], {3, 8}); }, {randn({2, 3, 4}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return transpose(v[0], 0, 2); }, {randn({2, 3, 4}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return permute(v[0], {2, 0, 1}); }, {randn({2, 3, 4}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return squeeze(unsqueeze(v[0], 1)); }, {randn({3, 4}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return narrow(v[0], 1, 1, 2); }, {randn({2, 4, 3}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return slice(v[0], 0, 1, 6, 2); }, {randn({7, 2}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return expand(v[0], {2, 3, 4}); }, {randn({3, 1}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return expand(v[0], {4, 3}); }, {randn({3}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return contiguous(transpose(v[0], 0, 1)); }, {randn({3, 5}, gen)}));
  // A strided view that feeds a reshape which must copy, and one that a reshape can view.
  EXPECT_TRUE(gradcheck([](const Vars& v) { return reshape(transpose(v[0], 0, 1), {-1}); }, {randn({3, 4}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return reshape(narrow(v[0], 0, 1, 2), {2, 2, 3}); },
                        {randn({4, 6}, gen)}));
}

TEST(ShapeGradient, SplitChunkCatStackAndPad) {
  Generator gen(32);
  // Pieces used in another order and one unused: each piece's gradient lands in its own rows,
  // and the unused rows get zero.
  EXPECT_TRUE(gradcheck(
      [](const Vars& v) {
        const std::vector<Variable> p = split(v[0], {2, 1, 2}, 0);
        return cat({p[2], p[0]}, 0);
      },
      {randn({5, 3}, gen)}));
  EXPECT_TRUE(gradcheck(
      [](const Vars& v) {
        const std::vector<Variable> p = chunk(v[0], 2, 1);
        return mul(p[0], p[1]);
      },
      {randn({3, 4}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return cat({v[0], v[1], v[0]}, -1); },
                        {randn({2, 3}, gen), randn({2, 2}, gen)}));
  EXPECT_TRUE(
      gradcheck([](const Vars& v) { return stack({v[0], v[1]}, 2); }, {randn({2, 3}, gen), randn({2, 3}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return pad(v[0], {1, 0, 2, 1}, 0.25); }, {randn({2, 3, 2}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return pad(v[0], {-1, 1, 0, -2}); }, {randn({2, 4, 3}, gen)}));
}

TEST(ShapeGradient, IndexSelectAndGatherWithRepeatedIndices) {
  Generator gen(33);
  const Tensor rows = Tensor::from_vector<std::int64_t>({2, 0, 2, 2}, {4});
  EXPECT_TRUE(gradcheck([&](const Vars& v) { return index_select(v[0], 0, rows); }, {randn({3, 4}, gen)}));
  const Tensor cols = Tensor::from_vector<std::int32_t>({1, 1, 0}, {3});
  EXPECT_TRUE(gradcheck([&](const Vars& v) { return index_select(v[0], -1, cols); }, {randn({2, 3, 2}, gen)}));
  const Tensor index = Tensor::from_vector<std::int64_t>({0, 2, 2, 1, 1, 1}, {2, 3});
  EXPECT_TRUE(gradcheck([&](const Vars& v) { return gather(v[0], 1, index); }, {randn({3, 4}, gen)}));
  EXPECT_TRUE(gradcheck([&](const Vars& v) { return gather(v[0], 0, index); }, {randn({3, 4}, gen)}));
}

TEST(ShapeIndexing, ValuesAndSixteenBitTypes) {
  const Variable x(arange_f({3, 4}));
  const Tensor rows = Tensor::from_vector<std::int64_t>({2, 0}, {2});
  EXPECT_THAT(index_select(x, 0, rows).data().to_vector<float>(), ElementsAre(8, 9, 10, 11, 0, 1, 2, 3));
  const Tensor index = Tensor::from_vector<std::int64_t>({3, 0, 1, 1}, {2, 2});
  EXPECT_THAT(gather(x, 1, index).data().to_vector<float>(), ElementsAre(3, 0, 5, 5));
  for (DType dt : {kBFloat16, kFloat16}) {
    const Variable h(x.data().to(dt));
    EXPECT_EQ(index_select(h, 0, rows).data().dtype(), dt);
    EXPECT_THAT(index_select(h, 0, rows).data().to(kFloat32).to_vector<float>(), ElementsAre(8, 9, 10, 11, 0, 1, 2, 3));
    EXPECT_THAT(gather(h, 1, index).data().to(kFloat32).to_vector<float>(), ElementsAre(3, 0, 5, 5));
    EXPECT_THAT(cat({h, h}, 0).data().to(kFloat32).to_vector<float>()[13], 1.f);
    EXPECT_EQ(pad(h, {1, 1}).data().dtype(), dt);
  }
}

TEST(ShapeErrors, BadInputsAreRefusedWithWhatWasExpected) {
  const Variable x(arange_f({2, 3, 4}));
  expect_error([&] { view(transpose(x, 0, 1), {24}); }, "use reshape");
  expect_error([&] { view(x, {5, -1}); }, "is invalid for input of shape (2, 3, 4)");
  expect_error([&] { reshape(x, {-1, -1}); }, "only one extent may be -1");
  expect_error([&] { transpose(x, 0, 3); }, "dimension 3 is out of range");
  expect_error([&] { permute(x, {0, 0, 1}); }, "appears twice");
  expect_error([&] { permute(x, {0, 1}); }, "expected 3 dimensions");
  expect_error([&] { expand(x, {2, 5, 4}); }, "only extents of 1 expand");
  expect_error([&] { narrow(x, 2, 3, 2); }, "does not fit dimension 2 of extent 4");
  expect_error([&] { slice(x, 0, 0, 1, 0); }, "step >= 1");
  expect_error([&] { cat({x, Variable(Tensor::zeros({2, 2, 4}))}, 2); }, "expected inputs of shape (2, 3, 4)");
  expect_error([&] { cat({}, 0); }, "at least one input");
  expect_error([&] { cat({x, Variable(Tensor::zeros({2, 3, 4}, kBFloat16))}, 0); }, "one dtype");
  expect_error([&] { stack({x, Variable(Tensor::zeros({2, 3}))}); }, "expected inputs of one shape");
  expect_error([&] { split(x, {1, 1}, 1); }, "sum to 2");
  expect_error([&] { chunk(x, 0); }, "chunks >= 1");
  expect_error([&] { pad(x, {1, 1, 1}); }, "even number of pads");
  expect_error([&] { pad(x, {-3, -2}); }, "negative extent");
  const Tensor bad = Tensor::from_vector<std::int64_t>({0, 3}, {2});
  expect_error([&] { index_select(x, 1, bad); }, "index 3 is out of range for a dimension of extent 3");
  expect_error([&] { index_select(x, 0, Tensor::zeros({2})); }, "int64 or int32");
  expect_error([&] { gather(x, 0, Tensor::from_vector<std::int64_t>({0}, {1})); }, "expected an index of 3 dimensions");
  expect_error([&] { gather(x, 0, Tensor::from_vector<std::int64_t>({0, 1, 0, 1}, {1, 4, 1})); },
               "extents no larger than (2, 3, 4)");
  expect_error([&] { embedding(bad, Variable(arange_f({3, 2})), 3); }, "padding_idx 3 is out of range");
  expect_error([&] { embedding(bad, Variable(arange_f({3}))); }, "with 2 dimensions");
}

// Views are strided; every op that reads them must either handle strides or copy first.
TEST(ShapeViews, TransposedViewsIntoOtherOpsGiveTheValuesOfACopy) {
  Generator gen(34);
  const Variable a(randn({4, 3}, gen)), b(randn({3, 4}, gen)), w(randn({5, 4}, gen)), bias(randn({5}, gen));
  const Variable at = transpose(a, 0, 1);  // (3, 4), strided
  const Variable ac(at.data().contiguous());
  ASSERT_FALSE(at.data().is_contiguous());
  const auto same = [](const Variable& got, const Variable& want, const char* what) {
    EXPECT_EQ(got.data().to_vector<float>(), want.data().to_vector<float>()) << what;
  };
  same(linear(at, w, bias), linear(ac, w, bias), "linear");
  same(matmul(at, transpose(b, 0, 1)), matmul(ac, Variable(transpose(b, 0, 1).data().contiguous())), "matmul");
  same(relu(at), relu(ac), "relu");
  same(add(at, b), add(ac, b), "add");
  same(mul(b, at), mul(b, ac), "mul");
  same(sigmoid(at), sigmoid(ac), "sigmoid");
  same(softmax(at), softmax(ac), "softmax");
  same(sum(at), sum(ac), "sum");
  same(mse_loss(at, b), mse_loss(ac, b), "mse_loss");
  // And gradients flow back through the view into the original layout.
  EXPECT_TRUE(gradcheck([&](const Vars& v) { return linear(transpose(v[0], 0, 1), v[1], v[2]); },
                        {randn({4, 3}, gen), randn({5, 4}, gen), randn({5}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return softmax(add(transpose(v[0], 0, 1), v[1])); },
                        {randn({4, 3}, gen), randn({3, 4}, gen)}));
}

}  // namespace
}  // namespace dpl
