// Modules and layers: parameter names and order, train/eval, Linear initialisation, Sequential.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& p : m.named_parameters()) out.push_back(p.first);
  return out;
}

class Named : public nn::Module {
 public:
  Variable forward(const Variable& x) override { return x; }
  Variable add(const std::string& name, Tensor value) { return register_parameter(name, std::move(value)); }
  Variable buffer(const std::string& name, Tensor value) { return register_buffer(name, std::move(value)); }
  void child(const std::string& name, std::shared_ptr<nn::Module> m) { register_module(name, std::move(m)); }
};

TEST(Module, MlpParameterNamesOrderAndShapes) {
  Generator gen(0);
  nn::MLP mlp(5, 4, 3, gen);
  EXPECT_THAT(names_of(mlp), ElementsAre("l1.weight", "l1.bias", "l2.weight", "l2.bias", "l3.weight", "l3.bias"));
  std::vector<Shape> shapes;
  for (const auto& p : mlp.named_parameters()) shapes.push_back(p.second.shape());
  EXPECT_THAT(shapes, ElementsAre((Shape{5, 4}), Shape{5}, (Shape{5, 5}), Shape{5}, (Shape{3, 5}), Shape{3}));
  EXPECT_EQ(mlp.num_parameters(), 5 + 20 + 5 + 25 + 3 + 15);
  for (const auto& v : mlp.parameters()) {
    EXPECT_TRUE(v.requires_grad());
    EXPECT_TRUE(v.is_leaf());
  }
  // parameters() is named_parameters() without the names, in the same order.
  const auto named = mlp.named_parameters();
  const auto plain = mlp.parameters();
  ASSERT_EQ(named.size(), plain.size());
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(named[i].second.id(), plain[i].id());
  EXPECT_EQ(mlp.device(), Device::cpu());
}

TEST(Module, ParametersFollowRegistrationOrderAcrossNesting) {
  Named root;
  root.add("z", Tensor::ones({1}));
  auto a = std::make_shared<Named>();
  a->add("y", Tensor::ones({1}));
  auto deep = std::make_shared<Named>();
  deep->add("x", Tensor::ones({1}));
  a->child("deep", deep);
  root.child("a", a);
  root.add("b", Tensor::ones({1}));
  EXPECT_THAT(names_of(root), ElementsAre("z", "a.y", "a.deep.x", "b"));
}

// Ten children: as text "10.weight" sorts before "2.weight"; registration order keeps 0..10.
TEST(Module, SequentialOfElevenKeepsNumericOrder) {
  nn::Sequential seq;
  for (int i = 0; i < 11; ++i) seq.append(std::make_shared<nn::Linear>(2, 2, false));
  const auto names = names_of(seq);
  ASSERT_EQ(names.size(), 11u);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(names[static_cast<std::size_t>(i)], std::to_string(i) + ".weight");
  // The arena lays parameters out in the same order.
  const auto& entries = seq.arena().entries();
  for (std::size_t i = 1; i < entries.size(); ++i) EXPECT_GT(entries[i].offset, entries[i - 1].offset);
}

TEST(Module, BuffersAreNamedListedAndNotTrained) {
  Named root;
  root.add("w", Tensor::ones({2}));
  const Variable mean = root.buffer("running_mean", Tensor::zeros({2}));
  auto child = std::make_shared<Named>();
  child->buffer("count", Tensor::from_vector<std::int64_t>({0}, {1}));
  root.child("bn", child);
  const auto buffers = root.named_buffers();
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(buffers[0].first, "running_mean");
  EXPECT_EQ(buffers[1].first, "bn.count");
  EXPECT_EQ(buffers[0].second.id(), mean.id());
  EXPECT_FALSE(buffers[0].second.requires_grad());
  EXPECT_EQ(buffers[1].second.dtype(), kInt64);
  // Buffers are not parameters: not in the arena, not counted.
  EXPECT_THAT(names_of(root), ElementsAre("w"));
  EXPECT_EQ(root.num_parameters(), 2);
  DPL_EXPECT_ERROR(root.buffer("w", Tensor::ones({1})), HasSubstr("already registered"));
  DPL_EXPECT_ERROR(root.add("running_mean", Tensor::ones({1})), HasSubstr("already registered"));
  DPL_EXPECT_ERROR(root.buffer("empty", Tensor()), HasSubstr("'empty' has no value"));
}

// The arena is cached: asking again repacks nothing; a registration anywhere below, or a
// parameter whose data is replaced, gives a fresh arena (and so fresh optimizer state).
TEST(Module, ArenaIsCachedAndRepackedOnlyOnChange) {
  Named root;
  root.add("w", Tensor::ones({3}));
  auto child = std::make_shared<Named>();
  const Variable v = child->add("v", Tensor::ones({2}));
  root.child("c", child);
  bool repacked = false;
  const std::uint64_t first = root.arena(&repacked).id();
  EXPECT_TRUE(repacked);
  EXPECT_EQ(root.arena(&repacked).id(), first);
  EXPECT_FALSE(repacked);

  // Another module's changes move the counters but leave this arena valid.
  Named other;
  other.add("u", Tensor::ones({1}));
  EXPECT_EQ(root.arena(&repacked).id(), first);
  EXPECT_FALSE(repacked);

  child->add("late", Tensor::full({4}, 2.0));  // registered below the root
  const std::uint64_t second = root.arena(&repacked).id();
  EXPECT_TRUE(repacked);
  EXPECT_NE(second, first);
  EXPECT_EQ(root.arena().numel(), 16 * 3);

  Variable late = root.named_parameters().back().second;
  late.set_data(Tensor::full({4}, 5.0));  // replaced behind the module's back
  EXPECT_NE(root.arena(&repacked).id(), second);
  EXPECT_TRUE(repacked);
  // The replacement's values are what the arena holds now.
  EXPECT_EQ(root.arena().params().view_range(32, {4}).to_vector<float>(), std::vector<float>(4, 5.f));
  EXPECT_EQ(v.data().shares_storage_with(root.arena().params()), true);
}

TEST(Module, ToMovesBuffersWithParameters) {
  Named m;
  m.add("w", Tensor::ones({2}));
  const Variable b = m.buffer("stat", Tensor::full({2}, 3.0));
  m.to(Device::cpu());
  EXPECT_EQ(b.data().to_vector<float>(), std::vector<float>(2, 3.f));
  EXPECT_EQ(m.named_buffers()[0].second.id(), b.id());
}

TEST(Module, RejectsBadOrDuplicateNames) {
  Named m;
  m.add("w", Tensor::ones({1}));
  DPL_EXPECT_ERROR(m.add("w", Tensor::ones({1})), AllOf(HasSubstr("'w'"), HasSubstr("already registered")));
  DPL_EXPECT_ERROR(m.child("w", std::make_shared<Named>()), HasSubstr("already registered"));
  DPL_EXPECT_ERROR(m.add("a.b", Tensor::ones({1})), HasSubstr("'a.b'"));
  DPL_EXPECT_ERROR(m.add("", Tensor::ones({1})), HasSubstr("non-empty"));
  DPL_EXPECT_ERROR(m.child("c", nullptr), HasSubstr("null"));
}

TEST(Module, TrainAndEvalPropagateToEverySubModule) {
  auto inner = std::make_shared<nn::Sequential>(
      std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::ReLU>()});
  nn::Sequential outer{inner, std::make_shared<nn::Linear>(2, 1)};
  const auto all = [&] {
    std::vector<bool> modes{outer.is_training(), inner->is_training()};
    for (const auto& c : inner->children()) modes.push_back(c.second->is_training());
    for (const auto& c : outer.children()) modes.push_back(c.second->is_training());
    return modes;
  };
  EXPECT_THAT(all(), ::testing::Each(true));
  outer.eval();
  EXPECT_THAT(all(), ::testing::Each(false));
  outer.train();
  EXPECT_THAT(all(), ::testing::Each(true));
  inner->train(false);  // a sub-tree alone
  EXPECT_TRUE(outer.is_training());
  EXPECT_FALSE(inner->children()[0].second->is_training());
}

TEST(Linear, InitialisationStatistics) {
  Generator gen(2024);
  const std::int64_t in = 400, out = 300;
  nn::Linear lin(in, out, true, gen);
  const auto w = lin.weight().data().to_vector<float>();
  double mean = 0, sq = 0;
  for (float x : w) mean += x;
  mean /= static_cast<double>(w.size());
  for (float x : w) sq += (x - mean) * (x - mean);
  const double var = sq / static_cast<double>(w.size());
  // N(0, 1/in) over 120000 draws: the mean's standard error is sqrt(1/400/120000) ~ 1.4e-4 and
  // the variance's is (1/400) * sqrt(2/120000) ~ 1e-5.
  EXPECT_NEAR(mean, 0.0, 1e-3);
  EXPECT_NEAR(var, 1.0 / in, 1e-4);
  for (float b : lin.bias().data().to_vector<float>()) ASSERT_EQ(b, 0.f);
  EXPECT_EQ(lin.weight().shape(), (Shape{out, in}));
  EXPECT_EQ(lin.bias().shape(), (Shape{out}));

  // The same seed gives the same layer.
  Generator again(2024);
  nn::Linear twin(in, out, true, again);
  EXPECT_EQ(twin.weight().data().to_vector<float>(), w);
}

TEST(Linear, ForwardAndNoBias) {
  nn::Linear lin(3, 2, false);
  EXPECT_THAT(names_of(lin), ElementsAre("weight"));
  EXPECT_FALSE(lin.bias().defined());
  Tensor w = lin.weight().data();  // a view: copying into it sets the layer's weight
  w.copy_(Tensor::from_vector<float>({1, 2, 3, -1, 0, 1}, {2, 3}));
  const Variable y = lin(Variable(Tensor::from_vector<float>({1, 1, 1, 2, 0, -1}, {2, 3})));
  EXPECT_THAT(y.data().to_vector<float>(), ElementsAre(6, 0, -1, -3));
  DPL_EXPECT_ERROR(nn::Linear(0, 3), AllOf(HasSubstr("Linear"), HasSubstr("in=0")));
}

TEST(Sequential, NamesChildrenByPositionAndComposes) {
  Generator gen(5);
  auto l0 = std::make_shared<nn::Linear>(4, 3, true, gen);
  auto l2 = std::make_shared<nn::Linear>(3, 2, true, gen);
  nn::Sequential seq{l0, std::make_shared<nn::ReLU>(), l2};
  EXPECT_EQ(seq.size(), 3u);
  EXPECT_THAT(names_of(seq), ElementsAre("0.weight", "0.bias", "2.weight", "2.bias"));
  seq.append(std::make_shared<nn::Flatten>());
  EXPECT_EQ(seq.children().back().first, "3");

  const Variable x(Tensor::normal({5, 4}, 0, 1, gen));
  const Variable expected = linear(relu(linear(x, l0->weight(), l0->bias())), l2->weight(), l2->bias());
  EXPECT_THAT(seq(x).data().to_vector<float>(), Pointwise(FloatNear(1e-6f), expected.data().to_vector<float>()));
}

TEST(Sequential, BackwardReachesEveryParameter) {
  Generator gen(6);
  nn::Sequential seq{std::make_shared<nn::Linear>(3, 4, true, gen), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Linear>(4, 2, true, gen)};
  seq.zero_grad();
  const Tensor labels = Tensor::from_vector<std::int32_t>({0, 1, 1}, {3});
  softmax_cross_entropy(seq(Variable(Tensor::normal({3, 3}, 0, 1, gen))), labels).backward();
  for (const auto& [name, p] : seq.named_parameters()) {
    double norm = 0;
    for (float g : p.grad().to_vector<float>()) norm += g * g;
    EXPECT_GT(norm, 0.0) << name;
  }
}

TEST(MLP, AcceptsImagesAndFlatRows) {
  Generator gen(8);
  nn::MLP mlp(6, 4, 3, gen);
  const Tensor images = Tensor::normal({2, 1, 2, 2}, 0, 1, gen);
  const Variable a = mlp(Variable(images));
  const Variable b = mlp(Variable(images.reshape({2, 4})));
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(a.data().to_vector<float>(), b.data().to_vector<float>());
}

}  // namespace
}  // namespace dpl

namespace dpl {
namespace {

// Weight sharing: a sub-module registered under two names owns one set of parameters, listed
// once, and the arena stays packed across calls (no repack, so optimizer state survives).
TEST(Module, SharedSubModuleIsListedOnceAndPacksOnce) {
  Generator gen(9);
  auto shared = std::make_shared<nn::Linear>(3, 3, true, gen);
  nn::Sequential seq{shared, std::make_shared<nn::ReLU>(), shared};
  EXPECT_THAT(names_of(seq), ElementsAre("0.weight", "0.bias"));
  const std::uint64_t id = seq.arena().id();
  bool repacked = true;
  seq.arena(&repacked);
  EXPECT_FALSE(repacked);
  EXPECT_EQ(seq.arena().id(), id);
}

// --- activation layers, Sequential from modules, summary ------------------------------------------

TEST(Sequential, TakesSharedPtrsAndModulesByValue) {
  Generator gen(3);
  auto first = std::make_shared<nn::Linear>(4, 3, true, gen);
  nn::Sequential seq(first, nn::ReLU(), nn::Linear(3, 2, true, gen), nn::LeakyReLU(0.2f), nn::Dropout(0.5f),
                     nn::Sigmoid(), nn::Tanh(), nn::GELU());
  ASSERT_EQ(seq.size(), 8u);
  EXPECT_EQ(seq.children()[0].second, first);
  EXPECT_EQ(names_of(seq), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_FLOAT_EQ(dynamic_cast<nn::LeakyReLU&>(*seq.children()[3].second).slope(), 0.2f);
  seq.eval();  // dropout off
  const Variable x(Tensor::normal({5, 4}, 0.f, 1.f, gen));
  const Variable want = gelu(tanh(sigmoid(leaky_relu(
      linear(relu(linear(x, first->weight(), first->bias())), seq.parameters()[2], seq.parameters()[3]), 0.2f))));
  EXPECT_EQ(seq(x).data().to_vector<float>(), want.data().to_vector<float>());
  // The initializer-list form still works.
  nn::Sequential listed{std::make_shared<nn::ReLU>(), std::make_shared<nn::Softmax>()};
  EXPECT_EQ(listed.size(), 2u);
}

TEST(Layers, DropoutFollowsTheTrainingFlag) {
  Generator gen(4);
  nn::Dropout drop(0.5f, gen);
  const Variable x(Tensor::ones({100}));
  const std::vector<float> on = drop(x).data().to_vector<float>();
  EXPECT_NE(std::count(on.begin(), on.end(), 0.f), 0);
  drop.eval();
  EXPECT_EQ(drop(x).data().to_vector<float>(), x.data().to_vector<float>());
}

TEST(Summary, ListsLayersShapesAndParameterCounts) {
  nn::Sequential seq(nn::Linear(4, 3), nn::ReLU(), nn::Dropout(0.5f), nn::Linear(3, 2), nn::LogSoftmax());
  const std::string text = nn::summary(seq, {8, 4});
  EXPECT_THAT(text, AllOf(HasSubstr("Linear"), HasSubstr("ReLU"), HasSubstr("Dropout"), HasSubstr("LogSoftmax"),
                          HasSubstr("(8, 3)"), HasSubstr("(8, 2)"), HasSubstr("15"), HasSubstr("8\n"),
                          HasSubstr("Total params: 23"), HasSubstr("Trainable params: 23")));
  EXPECT_TRUE(seq.is_training());  // restored after the evaluation-mode forward
  nn::MLP mlp(5, 6, 2);
  EXPECT_THAT(nn::summary(mlp, {1, 6}), AllOf(HasSubstr("l1"), HasSubstr("l3"), HasSubstr("MLP"), HasSubstr("(1, 2)"),
                                             HasSubstr("Total params: " + std::to_string(mlp.num_parameters()))));
  DPL_EXPECT_ERROR(nn::summary(seq, {8, 5}), HasSubstr("linear"));
}

}  // namespace
}  // namespace dpl
