// Normalisation by each sample's own statistics (layer_norm, group_norm) and their modules, and
// BatchNorm1d (batch_norm of the input viewed as an image): finite differences,
// PyTorch's values (tests/golden/normalization_golden.txt, written by
// tests/golden/make_normalization_golden.py), PyTorch state_dicts loaded by name, 16-bit inputs
// and parameters, and the errors for bad inputs.
// Golden tolerance 1e-4: the inputs are exact, what remains is float32 arithmetic (a variance, a
// square root and sums over a row).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/golden.hpp"
#include "support/gradcheck.hpp"
#include "support/source_tree.hpp"

namespace dpl {
namespace {

using ::testing::HasSubstr;
using test::expect_golden;
using test::GoldenCase;
using test::gradcheck;
using Vars = std::vector<Variable>;

constexpr float kNormTol = 1e-4f;

Tensor randn(const Shape& shape, Generator& gen) { return Tensor::normal(shape, 0.f, 1.f, gen); }

const GoldenCase& golden(const std::string& name) {
  static const std::vector<GoldenCase> cases = test::load_golden("normalization_golden.txt");
  for (const GoldenCase& c : cases)
    if (c.name == name) return c;
  ADD_FAILURE() << "tests/golden/normalization_golden.txt has no case " << name;
  static const GoldenCase none;
  return none;
}

// The case's tensor `key` as a leaf that requires a gradient, or undefined when the case has none.
Variable leaf(const GoldenCase& c, const std::string& key) {
  const auto it = c.tensors.find(key);
  return it == c.tensors.end() ? Variable() : Variable(it->second.clone(), true);
}

// Runs f on the case's x, w, b (leaves), backpropagates sum(y * gy) and compares y and every
// gradient the case holds with PyTorch's.
void check_golden_op(const GoldenCase& c, const std::function<Variable(const Vars&)>& f) {
  ASSERT_FALSE(c.tensors.empty());
  const Vars v = {leaf(c, "x"), leaf(c, "w"), leaf(c, "b")};
  const Variable y = f(v);
  expect_golden(y.data(), c.tensor("y"), c.name + " y", kNormTol, kNormTol);
  sum(mul(y, Variable(c.tensor("gy")))).backward();
  expect_golden(v[0].grad(), c.tensor("gx"), c.name + " gx", kNormTol, kNormTol);
  if (v[1].defined()) expect_golden(v[1].grad(), c.tensor("gw"), c.name + " gw", kNormTol, kNormTol);
  if (v[2].defined()) expect_golden(v[2].grad(), c.tensor("gb"), c.name + " gb", kNormTol, kNormTol);
}

Shape normalized_shape_of(const GoldenCase& c) {
  Shape s;
  for (double d : c.params.at("normalized_shape")) s.push_back(static_cast<std::int64_t>(d));
  return s;
}

// The module case's state_dict file, loaded into `module` by name, and its output for the case's
// input against PyTorch's.
void check_state_dict(nn::Module& module, const std::string& name) {
  const GoldenCase& c = golden(name);
  ASSERT_FALSE(c.tensors.empty());
  nn::load_weights(module, source_path("tests/golden/" + name + "_state_dict.safetensors"));
  module.eval();
  const Variable y = module.forward(Variable(c.tensor("x")));
  expect_golden(y.data(), c.tensor("y"), name + " y", kNormTol, kNormTol);
}

// --- layer_norm -------------------------------------------------------------------------------

TEST(LayerNorm, Gradcheck) {
  Generator gen(1);
  const Tensor x = randn({3, 2, 5}, gen), w = Tensor::uniform({2, 5}, 0.5f, 1.5f, gen), b = randn({2, 5}, gen);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return layer_norm(v[0], {2, 5}, v[1], v[2]); }, {x, w, b}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return layer_norm(v[0], {5}, v[1], v[2]); },
                        {x, Tensor::uniform({5}, 0.5f, 1.5f, gen), randn({5}, gen)}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return layer_norm(v[0], {5}); }, {x}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return layer_norm(v[0], {2, 5}, v[1]); }, {x, w}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return layer_norm(v[0], {2, 5}, Variable(), v[1]); }, {x, b}));
}

TEST(LayerNorm, MatchesPyTorch) {
  for (const char* name : {"layer_norm_2d", "layer_norm_4d_two_dims", "layer_norm_no_affine", "layer_norm_no_bias"}) {
    SCOPED_TRACE(name);
    const GoldenCase& c = golden(name);
    const Shape shape = normalized_shape_of(c);
    const double eps = c.param("eps");
    check_golden_op(c, [&](const Vars& v) { return layer_norm(v[0], shape, v[1], v[2], eps); });
  }
}

TEST(LayerNorm, ReadsStridedInputsAsRowMajor) {
  Generator gen(2);
  const Tensor x = randn({6, 4}, gen), w = randn({6}, gen), b = randn({6}, gen);
  const Tensor xt(x.storage(), x.offset(), {4, 6}, {1, 4}, kFloat32);  // x transposed, not contiguous
  ASSERT_FALSE(xt.is_contiguous());
  const Tensor want = layer_norm(Variable(xt.contiguous()), {6}, Variable(w), Variable(b)).data();
  const Tensor got = layer_norm(Variable(xt), {6}, Variable(w), Variable(b)).data();
  EXPECT_TRUE(got.is_contiguous());
  EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());
}

// f on 16-bit x with float32 or 16-bit parameters against f on float32: the gradients come in
// each operand's dtype and agree to the 16-bit rounding.
void check_16bit(const Shape& shape, const Shape& param_shape, const std::function<Variable(const Vars&)>& f) {
  Generator gen(3);
  const Tensor x = randn(shape, gen), w = randn(param_shape, gen), b = randn(param_shape, gen), gy = randn(shape, gen);
  const Vars v32 = {Variable(x, true), Variable(w, true), Variable(b, true)};
  const Variable y32 = f(v32);
  sum(mul(y32, Variable(gy))).backward();
  for (DType dt : {kBFloat16, kFloat16}) {
    for (bool wide_params : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (wide_params ? " float32 parameters" : " 16-bit parameters"));
      const DType pt = wide_params ? kFloat32 : dt;
      const Vars v = {Variable(x.to(dt), true), Variable(w.to(pt), true), Variable(b.to(pt), true)};
      const Variable y = f(v);
      EXPECT_EQ(y.dtype(), dt);
      sum(mul(y, Variable(gy.to(dt)))).backward();
      EXPECT_EQ(v[1].grad().dtype(), pt);
      EXPECT_EQ(v[2].grad().dtype(), pt);
      const float tol = dt == kBFloat16 ? 5e-2f : 1e-2f;
      expect_golden(y.data(), y32.data(), "y", tol, tol);
      expect_golden(v[0].grad(), v32[0].grad(), "gx", tol, tol);
      expect_golden(v[1].grad(), v32[1].grad(), "gw", tol, 4 * tol);
      expect_golden(v[2].grad(), v32[2].grad(), "gb", tol, 4 * tol);
    }
  }
}

TEST(LayerNorm, SixteenBitInputsWithFloat32Or16BitParameters) {
  check_16bit({4, 37}, {37}, [](const Vars& v) { return layer_norm(v[0], {37}, v[1], v[2]); });
}

TEST(LayerNorm, AccumulatesIntoExistingGradients) {
  Generator gen(4);
  Variable x(randn({3, 8}, gen), true), w(randn({8}, gen), true), b(randn({8}, gen), true);
  sum(layer_norm(x, {8}, w, b)).backward();
  const std::vector<float> gx = x.grad().to_vector<float>(), gw = w.grad().to_vector<float>();
  sum(layer_norm(x, {8}, w, b)).backward();
  for (std::size_t i = 0; i < gx.size(); ++i) EXPECT_FLOAT_EQ(x.grad().to_vector<float>()[i], 2 * gx[i]);
  for (std::size_t i = 0; i < gw.size(); ++i) EXPECT_FLOAT_EQ(w.grad().to_vector<float>()[i], 2 * gw[i]);
}

TEST(LayerNorm, RefusesBadInputs) {
  const Variable x(Tensor::ones({2, 3, 4}));
  DPL_EXPECT_ERROR(layer_norm(x, {}), HasSubstr("layer_norm: expected a non-empty normalized_shape"));
  DPL_EXPECT_ERROR(layer_norm(x, {3}), HasSubstr("expected an input whose last dimensions are normalized_shape (3,)"));
  DPL_EXPECT_ERROR(layer_norm(x, {2, 3, 4, 1}), HasSubstr("got shape (2, 3, 4)"));
  DPL_EXPECT_ERROR(layer_norm(x, {0}), HasSubstr("expected a normalized_shape of extents >= 1"));
  DPL_EXPECT_ERROR(layer_norm(x, {4}, Variable(), Variable(), 0.0), HasSubstr("expected eps > 0"));
  DPL_EXPECT_ERROR(layer_norm(x, {4}, Variable(Tensor::ones({3}))),
                   HasSubstr("layer_norm: expected a weight of shape (4,), got (3,)"));
  DPL_EXPECT_ERROR(layer_norm(x, {3, 4}, Variable(), Variable(Tensor::ones({4}))),
                   HasSubstr("expected a bias of shape (3, 4), got (4,)"));
  DPL_EXPECT_ERROR(layer_norm(Variable(Tensor::ones({2, 4}, kBFloat16)), {4}, Variable(Tensor::ones({4}, kFloat16))),
                   HasSubstr("expected a weight of the input's dtype bfloat16 or float32, got float16"));
  DPL_EXPECT_ERROR(layer_norm(Variable(Tensor::ones({2, 4}, kInt64)), {4}), HasSubstr("layer_norm: expected an input"));
  DPL_EXPECT_ERROR(layer_norm(Variable(), {4}), HasSubstr("got an undefined Variable"));
}

// --- group_norm -------------------------------------------------------------------------------

TEST(GroupNorm, Gradcheck) {
  Generator gen(6);
  const Tensor w = Tensor::uniform({4}, 0.5f, 1.5f, gen), b = randn({4}, gen);
  const Tensor image = randn({3, 4, 2, 3}, gen);
  EXPECT_TRUE(gradcheck([](const Vars& v) { return group_norm(v[0], 2, v[1], v[2]); }, {image, w, b}));
  EXPECT_TRUE(
      gradcheck([](const Vars& v) { return group_norm(v[0], 2, v[1], v[2]); }, {image.to_channels_last(), w, b}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return group_norm(v[0], 4, v[1], v[2]); }, {randn({2, 4, 5}, gen), w, b}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return group_norm(v[0], 2, v[1], v[2]); }, {randn({3, 4}, gen), w, b}));
  EXPECT_TRUE(gradcheck([](const Vars& v) { return group_norm(v[0], 1); }, {randn({2, 4, 3}, gen)}));
}

TEST(GroupNorm, MatchesPyTorch) {
  for (const char* name :
       {"group_norm_4d", "group_norm_3d", "group_norm_2d", "group_norm_one_channel_per_group_no_affine"}) {
    SCOPED_TRACE(name);
    const GoldenCase& c = golden(name);
    const std::int64_t groups = c.int_param("groups");
    const double eps = c.param("eps");
    check_golden_op(c, [&](const Vars& v) { return group_norm(v[0], groups, v[1], v[2], eps); });
  }
}

TEST(GroupNorm, ChannelsLastImagesGiveTheValuesOfNchw) {
  Generator gen(7);
  const Tensor x = randn({2, 6, 3, 4}, gen), w = randn({6}, gen), b = randn({6}, gen), gy = randn({2, 6, 3, 4}, gen);
  Variable xc(x.clone(), true), xl(x.to_channels_last(), true);
  const Variable yc = group_norm(xc, 3, Variable(w), Variable(b)), yl = group_norm(xl, 3, Variable(w), Variable(b));
  EXPECT_EQ(yl.data().contiguous().to_vector<float>(), yc.data().to_vector<float>());
  sum(mul(yc, Variable(gy))).backward();
  sum(mul(yl, Variable(gy))).backward();
  EXPECT_TRUE(xl.grad().is_channels_last());
  EXPECT_EQ(xl.grad().contiguous().to_vector<float>(), xc.grad().to_vector<float>());
}

TEST(GroupNorm, SixteenBitInputsWithFloat32Or16BitParameters) {
  check_16bit({3, 6, 5, 3}, {6}, [](const Vars& v) { return group_norm(v[0], 3, v[1], v[2]); });
}

TEST(GroupNorm, RefusesBadInputs) {
  const Variable x(Tensor::ones({2, 6, 3}));
  DPL_EXPECT_ERROR(group_norm(Variable(Tensor::ones({6})), 2), HasSubstr("group_norm: expected an input (N, C, *)"));
  DPL_EXPECT_ERROR(group_norm(x, 4), HasSubstr("expected num_groups >= 1 dividing the 6 channels"));
  DPL_EXPECT_ERROR(group_norm(x, 0), HasSubstr("got 0"));
  DPL_EXPECT_ERROR(group_norm(x, 3, Variable(), Variable(), -1.0), HasSubstr("expected eps > 0"));
  DPL_EXPECT_ERROR(group_norm(x, 3, Variable(Tensor::ones({3}))),
                   HasSubstr("group_norm: expected a weight of shape (6,), got (3,)"));
  DPL_EXPECT_ERROR(group_norm(x, 3, Variable(), Variable(Tensor::ones({6, 1}))),
                   HasSubstr("expected a bias of shape (6,)"));
}

// --- nn::LayerNorm ----------------------------------------------------------------------------

TEST(LayerNormModule, HasPyTorchsParameters) {
  nn::LayerNorm ln(nn::LayerNormOptions({4, 5}));
  const auto params = ln.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[1].first, "bias");
  EXPECT_EQ(params[0].second.shape(), (Shape{4, 5}));
  EXPECT_EQ(params[1].second.shape(), (Shape{4, 5}));
  EXPECT_EQ(params[0].second.data().to_vector<float>(), std::vector<float>(20, 1.f));
  EXPECT_EQ(params[1].second.data().to_vector<float>(), std::vector<float>(20, 0.f));
  EXPECT_TRUE(ln.named_buffers().empty());
  EXPECT_EQ(ln.options().eps(), 1e-5);

  nn::LayerNorm no_bias(nn::LayerNormOptions({8}).bias(false));
  ASSERT_EQ(no_bias.named_parameters().size(), 1u);
  EXPECT_EQ(no_bias.named_parameters()[0].first, "weight");
  EXPECT_FALSE(no_bias.bias().defined());
  nn::LayerNorm plain(nn::LayerNormOptions({8}).elementwise_affine(false).eps(1e-3));
  EXPECT_TRUE(plain.named_parameters().empty());
  EXPECT_EQ(plain.options().eps(), 1e-3);
}

TEST(LayerNormModule, ForwardIsTheOpWithItsParameters) {
  Generator gen(5);
  nn::LayerNorm ln(nn::LayerNormOptions({6}).eps(1e-3));
  Tensor w = ln.weight().data(), b = ln.bias().data();
  w.copy_(randn({6}, gen));
  b.copy_(randn({6}, gen));
  const Tensor x = randn({2, 3, 6}, gen);
  const Tensor want = layer_norm(Variable(x), {6}, ln.weight(), ln.bias(), 1e-3).data();
  EXPECT_EQ(ln.forward(Variable(x)).data().to_vector<float>(), want.to_vector<float>());
}

TEST(LayerNormModule, LoadsAPyTorchStateDict) {
  nn::LayerNorm ln(nn::LayerNormOptions({4, 5}));
  check_state_dict(ln, "layer_norm_module");
}

TEST(LayerNormModule, RefusesBadOptions) {
  DPL_EXPECT_ERROR(nn::LayerNorm(nn::LayerNormOptions(Shape{})), HasSubstr("LayerNorm: expected a non-empty"));
  DPL_EXPECT_ERROR(nn::LayerNorm(nn::LayerNormOptions({2, 0})), HasSubstr("extents >= 1, got (2, 0)"));
  DPL_EXPECT_ERROR(nn::LayerNorm(nn::LayerNormOptions({2}).eps(-1.0)), HasSubstr("LayerNorm: expected eps > 0"));
}

// --- nn::GroupNorm ----------------------------------------------------------------------------

TEST(GroupNormModule, HasPyTorchsParameters) {
  nn::GroupNorm gn(nn::GroupNormOptions(2, 6));
  const auto params = gn.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[1].first, "bias");
  EXPECT_EQ(params[0].second.data().to_vector<float>(), std::vector<float>(6, 1.f));
  EXPECT_EQ(params[1].second.data().to_vector<float>(), std::vector<float>(6, 0.f));
  EXPECT_TRUE(gn.named_buffers().empty());
  EXPECT_EQ(gn.options().eps(), 1e-5);
  nn::GroupNorm plain(nn::GroupNormOptions(3, 6).affine(false).eps(1e-3));
  EXPECT_TRUE(plain.named_parameters().empty());
  EXPECT_FALSE(plain.weight().defined());
}

TEST(GroupNormModule, ForwardIsTheOpWithItsParameters) {
  Generator gen(8);
  nn::GroupNorm gn(nn::GroupNormOptions(2, 4).eps(1e-3));
  Tensor w = gn.weight().data(), b = gn.bias().data();
  w.copy_(randn({4}, gen));
  b.copy_(randn({4}, gen));
  const Tensor x = randn({2, 4, 3, 3}, gen);
  const Tensor want = group_norm(Variable(x), 2, gn.weight(), gn.bias(), 1e-3).data();
  EXPECT_EQ(gn.forward(Variable(x)).data().to_vector<float>(), want.to_vector<float>());
}

TEST(GroupNormModule, LoadsAPyTorchStateDict) {
  nn::GroupNorm gn(nn::GroupNormOptions(2, 6));
  check_state_dict(gn, "group_norm_module");
}

TEST(GroupNormModule, RefusesBadOptionsAndInputs) {
  DPL_EXPECT_ERROR(nn::GroupNorm(nn::GroupNormOptions(2, 0)), HasSubstr("GroupNorm: expected num_channels >= 1"));
  DPL_EXPECT_ERROR(nn::GroupNorm(nn::GroupNormOptions(4, 6)), HasSubstr("dividing num_channels 6, got 4"));
  DPL_EXPECT_ERROR(nn::GroupNorm(nn::GroupNormOptions(2, 6).eps(0.0)), HasSubstr("GroupNorm: expected eps > 0"));
  nn::GroupNorm gn(nn::GroupNormOptions(2, 6));
  DPL_EXPECT_ERROR(gn.forward(Variable(Tensor::ones({2, 4, 3}))),
                   HasSubstr("GroupNorm: expected an input (N, 6, *), got (2, 4, 3)"));
}

// --- nn::BatchNorm1d --------------------------------------------------------------------------

TEST(BatchNorm1dModule, HasPyTorchsParametersAndBuffers) {
  nn::BatchNorm1d bn(5);
  const auto params = bn.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[1].first, "bias");
  EXPECT_EQ(params[0].second.data().to_vector<float>(), std::vector<float>(5, 1.f));
  EXPECT_EQ(params[1].second.data().to_vector<float>(), std::vector<float>(5, 0.f));
  const auto buffers = bn.named_buffers();
  ASSERT_EQ(buffers.size(), 3u);
  EXPECT_EQ(buffers[0].first, "running_mean");
  EXPECT_EQ(buffers[1].first, "running_var");
  EXPECT_EQ(buffers[2].first, "num_batches_tracked");
  EXPECT_EQ(bn.running_mean().to_vector<float>(), std::vector<float>(5, 0.f));
  EXPECT_EQ(bn.running_var().to_vector<float>(), std::vector<float>(5, 1.f));
  EXPECT_EQ(bn.num_batches_tracked().dtype(), kInt64);
  EXPECT_EQ(bn.num_batches_tracked().shape(), Shape{});
  nn::BatchNorm1d plain(nn::BatchNorm1dOptions(5).affine(false).momentum(0.5));
  EXPECT_TRUE(plain.named_parameters().empty());
  EXPECT_EQ(plain.named_buffers().size(), 3u);
  EXPECT_EQ(plain.options().momentum(), 0.5);
}

// One training step against PyTorch's: output, gradients, running statistics and the count.
TEST(BatchNorm1dModule, TrainingMatchesPyTorch) {
  for (const char* name : {"batch_norm1d_2d", "batch_norm1d_3d"}) {
    SCOPED_TRACE(name);
    const GoldenCase& c = golden(name);
    ASSERT_FALSE(c.tensors.empty());
    nn::BatchNorm1d bn(nn::BatchNorm1dOptions(c.tensor("w").size(0)).momentum(c.param("momentum")).eps(c.param("eps")));
    Tensor w = bn.weight().data(), b = bn.bias().data();
    w.copy_(c.tensor("w"));
    b.copy_(c.tensor("b"));
    const Variable x(c.tensor("x").clone(), true);
    const Variable y = bn.forward(x);
    expect_golden(y.data(), c.tensor("y"), "y", kNormTol, kNormTol);
    sum(mul(y, Variable(c.tensor("gy")))).backward();
    expect_golden(x.grad(), c.tensor("gx"), "gx", kNormTol, kNormTol);
    expect_golden(bn.weight().grad(), c.tensor("gw"), "gw", kNormTol, kNormTol);
    expect_golden(bn.bias().grad(), c.tensor("gb"), "gb", kNormTol, kNormTol);
    expect_golden(bn.running_mean(), c.tensor("running_mean"), "running_mean", kNormTol, kNormTol);
    expect_golden(bn.running_var(), c.tensor("running_var"), "running_var", kNormTol, kNormTol);
    EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), std::vector<std::int64_t>{1});
  }
}

TEST(BatchNorm1dModule, GradcheckThroughTheBatchStatistics) {
  Generator gen(9);
  nn::BatchNorm1d bn(nn::BatchNorm1dOptions(3).affine(false));
  EXPECT_TRUE(gradcheck([&](const Vars& v) { return bn.forward(v[0]); }, {randn({4, 3}, gen)}));
  EXPECT_TRUE(gradcheck([&](const Vars& v) { return bn.forward(v[0]); }, {randn({2, 3, 4}, gen)}));
}

TEST(BatchNorm1dModule, EvaluationUsesTheRunningStatistics) {
  Generator gen(10);
  nn::BatchNorm1d bn(4);
  Tensor rm = bn.running_mean(), rv = bn.running_var();
  rm.copy_(randn({4}, gen));
  rv.copy_(Tensor::uniform({4}, 0.5f, 2.f, gen));
  bn.eval();
  const Tensor x = randn({1, 4, 3}, gen);  // one value per channel and position: fine in evaluation
  const Tensor want = batch_norm(Variable(x.reshape({1, 4, 3, 1})), bn.weight(), bn.bias(), rm, rv, false).data();
  EXPECT_EQ(bn.forward(Variable(x)).data().to_vector<float>(), want.to_vector<float>());
  EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), std::vector<std::int64_t>{0});
}

TEST(BatchNorm1dModule, LoadsAPyTorchStateDict) {
  nn::BatchNorm1d bn(5);
  check_state_dict(bn, "batch_norm1d_module");
  EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), std::vector<std::int64_t>{7});
}

TEST(BatchNorm1dModule, RefusesBadOptionsAndInputs) {
  DPL_EXPECT_ERROR(nn::BatchNorm1d(0), HasSubstr("BatchNorm1d: expected num_features >= 1, got 0"));
  DPL_EXPECT_ERROR(nn::BatchNorm1d(3, 0.0), HasSubstr("BatchNorm1d: expected eps > 0"));
  DPL_EXPECT_ERROR(nn::BatchNorm1d(3, 1e-5, 1.5), HasSubstr("BatchNorm1d: expected momentum in [0, 1]"));
  nn::BatchNorm1d bn(3);
  DPL_EXPECT_ERROR(bn.forward(Variable(Tensor::ones({2, 4}))),
                   HasSubstr("BatchNorm1d: expected an input (N, 3) or (N, 3, L), got shape (2, 4)"));
  DPL_EXPECT_ERROR(bn.forward(Variable(Tensor::ones({2, 3, 4, 1}))), HasSubstr("got shape (2, 3, 4, 1)"));
  DPL_EXPECT_ERROR(bn.forward(Variable(Tensor::ones({1, 3}))),
                   HasSubstr("BatchNorm1d: training mode needs at least 2 values per channel (N*L), got shape (1, 3)"));
  DPL_EXPECT_ERROR(bn.forward(Variable()), HasSubstr("got an undefined Variable"));
}

}  // namespace
}  // namespace dpl
