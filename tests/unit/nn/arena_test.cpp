// ParameterArena and Module::arena: parameters and gradients as views of two flat buffers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/parameter_bag.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Bag = test::ParameterBag;

// zeta (5,), alpha (2, 3), inner.w (17,), inner.b (16,): sizes on both sides of the alignment.
std::shared_ptr<Bag> make_bag() {
  auto bag = std::make_shared<Bag>();
  bag->add("zeta", Tensor::arange(1, 6));
  bag->add("alpha", Tensor::arange(10, 16).reshape({2, 3}));
  auto inner = bag->child("inner", std::make_shared<Bag>());
  inner->add("w", Tensor::full({17}, 0.5));
  inner->add("b", Tensor::full({16}, -1.0));
  return bag;
}

const nn::ArenaEntry& entry(const nn::ParameterArena& a, const std::string& name) {
  for (const auto& e : a.entries())
    if (e.name == name) return e;
  throw std::runtime_error("no arena entry " + name);
}

TEST(Arena, EntriesFollowRegistrationOrderAndAreAligned) {
  auto bag = make_bag();
  const nn::ParameterArena& a = bag->arena();
  std::vector<std::string> names;
  for (const auto& e : a.entries()) names.push_back(e.name);
  EXPECT_THAT(names, ElementsAre("zeta", "alpha", "inner.w", "inner.b"));

  // Offsets: zeta 5 -> 16, alpha 6 -> 16, inner.w 17 -> 32, inner.b 16 -> 16.
  std::vector<std::int64_t> offsets;
  for (const auto& e : a.entries()) offsets.push_back(e.offset);
  EXPECT_THAT(offsets, ElementsAre(0, 16, 32, 64));
  EXPECT_EQ(a.numel(), 80);
  EXPECT_EQ(a.nbytes(), 80u * 4u);
  for (const auto& e : a.entries()) {
    EXPECT_EQ(e.offset % nn::kArenaAlignment, 0) << e.name;
    EXPECT_EQ(e.numel, shape_numel(e.shape)) << e.name;
  }
  EXPECT_EQ(entry(a, "alpha").shape, (Shape{2, 3}));
  EXPECT_EQ(a.params().dim(), 1);
  EXPECT_EQ(a.grads().shape(), a.params().shape());
  EXPECT_FALSE(a.grads().shares_storage_with(a.params()));
  // 16 floats are 64 bytes: each parameter starts on a cache line.
  for (const auto& e : a.entries())
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.params().view_range(e.offset, {e.numel}).raw_data()) % 64, 0u);
}

TEST(Arena, ValuesArePackedAndPaddingIsZero) {
  auto bag = make_bag();
  const nn::ParameterArena& a = bag->arena();
  const auto p = a.params().to_vector<float>();
  const auto g = a.grads().to_vector<float>();
  std::vector<bool> covered(p.size(), false);
  for (const auto& e : a.entries())
    for (std::int64_t i = 0; i < e.numel; ++i) covered[static_cast<std::size_t>(e.offset + i)] = true;
  for (std::size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(g[i], 0.f) << "gradients start at zero, element " << i;
    if (!covered[i]) {
      EXPECT_EQ(p[i], 0.f) << "padding element " << i;
    }
  }
  const auto& z = entry(a, "zeta");
  EXPECT_THAT(std::vector<float>(p.begin() + z.offset, p.begin() + z.offset + 5), ElementsAre(1, 2, 3, 4, 5));
  const auto& al = entry(a, "alpha");
  EXPECT_THAT(std::vector<float>(p.begin() + al.offset, p.begin() + al.offset + 6), ElementsAre(10, 11, 12, 13, 14, 15));
}

TEST(Arena, ParametersAndGradsAreViewsIntoTheArenas) {
  auto bag = make_bag();
  nn::ParameterArena& a = bag->arena();
  for (const auto& [name, var] : bag->named_parameters()) {
    const auto& e = entry(a, name);
    EXPECT_TRUE(var.data().shares_storage_with(a.params())) << name;
    EXPECT_EQ(var.data().offset(), a.params().offset() + e.offset) << name;
    EXPECT_TRUE(var.grad().shares_storage_with(a.grads())) << name;
    EXPECT_EQ(var.grad().offset(), a.grads().offset() + e.offset) << name;
  }
  EXPECT_TRUE(a.binds(bag->named_parameters()));

  // Writes through a parameter land in the arena at its offset, and the other way round.
  const auto params = bag->named_parameters();
  const Variable alpha = params[1].second;
  ASSERT_EQ(params[1].first, "alpha");
  alpha.data().data<float>()[4] = 99.f;  // alpha[1][1]
  EXPECT_FLOAT_EQ(a.params().at<float>({entry(a, "alpha").offset + 4}), 99.f);
  a.params().data<float>()[entry(a, "zeta").offset + 2] = -7.f;
  EXPECT_FLOAT_EQ(params[0].second.data().at<float>({2}), -7.f);

  alpha.grad().data<float>()[1] = 3.f;
  EXPECT_FLOAT_EQ(a.grads().at<float>({entry(a, "alpha").offset + 1}), 3.f);
}

TEST(Arena, BackwardAccumulatesIntoTheGradArena) {
  auto bag = make_bag();
  nn::ParameterArena& a = bag->arena();
  const auto params = bag->named_parameters();
  const Variable zeta = params[0].second;
  sum(mul(zeta, zeta)).backward();
  const auto& e = entry(a, "zeta");
  const auto g = a.grads().to_vector<float>();
  EXPECT_THAT(std::vector<float>(g.begin() + e.offset, g.begin() + e.offset + 5), ElementsAre(2, 4, 6, 8, 10));
  // Backward kept the binding (it wrote into the view rather than replacing it).
  bool repacked = true;
  EXPECT_EQ(&bag->arena(&repacked), &a);
  EXPECT_FALSE(repacked);
}

TEST(Arena, ZeroGradZeroesTheWholeGradArena) {
  auto bag = make_bag();
  nn::ParameterArena& a = bag->arena();
  Tensor grads = a.grads();
  grads.fill_(3.0);  // padding included
  bag->zero_grad();
  for (float g : a.grads().to_vector<float>()) ASSERT_EQ(g, 0.f);
  // The parameters are untouched.
  EXPECT_FLOAT_EQ(a.params().at<float>({entry(a, "zeta").offset}), 1.f);
}

TEST(Arena, RepacksWhenAParameterIsAdded) {
  auto bag = make_bag();
  nn::ParameterArena* first = &bag->arena();
  first->params().data<float>()[entry(*first, "zeta").offset] = 42.f;
  bool repacked = true;
  bag->arena(&repacked);
  EXPECT_FALSE(repacked);

  bag->add("beta", Tensor::full({3}, 8.0));
  nn::ParameterArena& a = bag->arena(&repacked);
  EXPECT_TRUE(repacked);
  std::vector<std::string> names;
  for (const auto& e : a.entries()) names.push_back(e.name);
  EXPECT_THAT(names, ElementsAre("zeta", "alpha", "inner.w", "inner.b", "beta"));
  EXPECT_EQ(entry(a, "beta").offset, 80);
  EXPECT_EQ(a.numel(), 96);
  // Values written into the old arena move along, and every parameter views the new one.
  EXPECT_FLOAT_EQ(a.params().at<float>({entry(a, "zeta").offset}), 42.f);
  EXPECT_FLOAT_EQ(a.params().at<float>({entry(a, "beta").offset + 2}), 8.f);
  EXPECT_TRUE(a.binds(bag->named_parameters()));
}

TEST(Arena, RepacksWhenAParameterDataIsReplaced) {
  auto bag = make_bag();
  const Tensor old_params = bag->arena().params();
  Variable zeta = bag->named_parameters()[0].second;
  zeta.set_data(Tensor::full({7}, 2.0));  // a new shape, outside the arena
  EXPECT_FALSE(zeta.data().shares_storage_with(old_params));
  bool repacked = false;
  nn::ParameterArena& a = bag->arena(&repacked);
  EXPECT_TRUE(repacked);
  const auto& e = entry(a, "zeta");
  EXPECT_EQ(e.shape, (Shape{7}));
  EXPECT_TRUE(zeta.data().shares_storage_with(a.params()));
  EXPECT_TRUE(zeta.grad().shares_storage_with(a.grads()));
  EXPECT_FLOAT_EQ(a.params().at<float>({e.offset + 6}), 2.f);
  EXPECT_EQ(a.params().at<float>({e.offset + 7}), 0.f);  // fresh padding
}

TEST(Arena, PackRejectsMixedDtypes) {
  std::vector<std::pair<std::string, Variable>> named = {{"a", Variable(Tensor::ones({2}), true)},
                                                         {"b", Variable(Tensor::ones({2}, kInt32), true)}};
  DPL_EXPECT_ERROR(nn::ParameterArena::pack(named), AllOf(HasSubstr("pack"), HasSubstr("'b'"), HasSubstr("int32")));
}

// A model cast to 16 bits packs into 16-bit arenas with the float32 layout: offsets count
// elements, so a float32 copy of the same parameters lines up element for element.
TEST(Arena, SixteenBitParametersPackIntoSixteenBitArenasOfTheSameLayout) {
  std::vector<std::pair<std::string, Variable>> f32 = {{"a", Variable(Tensor::ones({3}), true)},
                                                       {"b", Variable(Tensor::ones({20}), true)}};
  std::vector<std::pair<std::string, Variable>> b16 = {{"a", Variable(Tensor::ones({3}, kBFloat16), true)},
                                                       {"b", Variable(Tensor::ones({20}, kBFloat16), true)}};
  const nn::ParameterArena wide = nn::ParameterArena::pack(f32), narrow = nn::ParameterArena::pack(b16);
  EXPECT_EQ(narrow.dtype(), kBFloat16);
  EXPECT_EQ(narrow.grads().dtype(), kBFloat16);
  EXPECT_EQ(b16[1].second.grad().dtype(), kBFloat16);
  EXPECT_EQ(narrow.numel(), wide.numel());
  EXPECT_EQ(narrow.entries()[1].offset, wide.entries()[1].offset);
  EXPECT_EQ(narrow.nbytes() * 2, wide.nbytes());
}

TEST(Arena, PackRejectsTwoFloatDtypes) {
  std::vector<std::pair<std::string, Variable>> named = {{"a", Variable(Tensor::ones({2}), true)},
                                                         {"b", Variable(Tensor::ones({2}, kFloat16), true)}};
  DPL_EXPECT_ERROR(nn::ParameterArena::pack(named),
                   HasSubstr("expected every parameter of dtype float32 (the first parameter's), got parameter 'b' "
                             "of dtype float16"));
}

TEST(Arena, EmptyModuleHasAnEmptyArena) {
  Bag bag;
  const nn::ParameterArena& a = bag.arena();
  EXPECT_EQ(a.numel(), 0);
  EXPECT_TRUE(a.entries().empty());
  bag.zero_grad();  // nothing to do, nothing to throw
}

}  // namespace
}  // namespace dpl

namespace dpl {
namespace {

// A channels-last weight keeps its format in the arena (so convolutions read it without a copy),
// its gradient view too, the arena stays bound across calls, and one optimizer step gives the
// same values as the contiguous model's.
TEST(Arena, ChannelsLastParametersStayChannelsLastAndTrainTheSame) {
  auto step = [](bool channels_last) {
    Generator gen(5);
    nn::Conv2d conv(3, 4, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, gen);
    if (channels_last) nn::to_channels_last(conv);
    optim::MomentumSGD opt(0.1f, 0.9f);
    opt.setup(conv);
    const nn::ParameterArena& arena = conv.arena();
    const std::uint64_t id = arena.id();
    Generator data(6);
    Tensor x = Tensor::uniform({2, 3, 5, 5}, -1.f, 1.f, data);
    if (channels_last) x = x.to_channels_last();
    opt.update([&] { return sum(mul(conv(Variable(x)), conv(Variable(x)))); });
    const Variable w = conv.weight();
    EXPECT_EQ(conv.arena().id(), id) << "the arena was repacked";
    EXPECT_EQ(w.data().is_channels_last() && !w.data().is_contiguous(), channels_last);
    EXPECT_EQ(w.grad().strides(), w.data().strides());
    EXPECT_TRUE(w.data().shares_storage_with(conv.arena().params()));
    return w.data().contiguous().to_vector<float>();
  };
  const std::vector<float> nchw = step(false), nhwc = step(true);
  ASSERT_EQ(nchw.size(), nhwc.size());
  for (std::size_t i = 0; i < nchw.size(); ++i) EXPECT_NEAR(nchw[i], nhwc[i], 1e-5f) << i;
}

}  // namespace
}  // namespace dpl
