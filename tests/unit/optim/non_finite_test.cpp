// The non-finite check (optim::NonFinitePolicy): the flag kernel, and what an update does with an
// Inf or NaN under each policy, for plain optimizers and under mixed precision.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "backend/kernels.hpp"
#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr std::int64_t kIn = 6, kUnits = 8, kOut = 3, kBatch = 10;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Batch {
  Tensor x, y;
};

// A fixed batch; with `poison`, one input pixel is NaN, as a corrupt sample would be.
Batch make_batch(bool poison) {
  Generator gen(5);
  Batch b{Tensor::normal({kBatch, kIn}, 0.f, 1.f, gen), Tensor::empty({kBatch}, kInt32)};
  for (std::int64_t i = 0; i < kBatch; ++i) b.y.set<std::int32_t>({i}, static_cast<std::int32_t>(i % kOut));
  if (poison) b.x.set<float>({4, 2}, kNaN);
  return b;
}

// Whether a and b hold the same bits (NaN equal to NaN).
bool same_values(const Tensor& a, const Tensor& b) {
  const auto va = a.to(kFloat32).to_vector<float>(), vb = b.to(kFloat32).to_vector<float>();
  if (va.size() != vb.size()) return false;
  for (std::size_t i = 0; i < va.size(); ++i)
    if (!(va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i])))) return false;
  return true;
}

Variable step(optim::Optimizer& opt, nn::Module& model, const Batch& b, DType dtype = kFloat32) {
  return opt.update([&] { return softmax_cross_entropy(model(Variable(b.x.to(dtype))), b.y); });
}

// --- the kernel ----------------------------------------------------------------------------------

TEST(NonFiniteCheck, KernelRaisesTheFlagForInfAndNaNOnly) {
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor flag = Tensor::zeros({1}, kFloat32);
    const Tensor clean = Tensor::from_vector<float>({1.f, -2.f, 0.f, 1e-3f, 60000.f}, {5}).to(dt);
    backend::flag_non_finite(clean, flag);
    EXPECT_EQ(flag.item(), 0.f) << "finite values";
    for (float bad : {kNaN, kInf, -kInf}) {
      flag.fill_(0.0);
      Tensor t = clean.clone();
      t.narrow(0, 3, 1).fill_(static_cast<double>(bad));
      backend::flag_non_finite(t, flag);
      EXPECT_EQ(flag.item(), 1.f) << bad;
    }
    // A clean buffer leaves a raised flag raised, so one flag can cover several buffers.
    backend::flag_non_finite(clean, flag);
    EXPECT_EQ(flag.item(), 1.f);
  }
  // Deep in a buffer long enough for the parallel loop, and an empty buffer.
  Tensor flag = Tensor::zeros({1}, kFloat32);
  Tensor big = Tensor::ones({1 << 20});
  big.narrow(0, (1 << 20) - 7, 1).fill_(std::nan(""));
  backend::flag_non_finite(big, flag);
  EXPECT_EQ(flag.item(), 1.f) << "NaN near the end of 2^20 elements";
  flag.fill_(0.0);
  backend::flag_non_finite(Tensor::zeros({0}), flag);
  EXPECT_EQ(flag.item(), 0.f) << "an empty buffer";
}

TEST(NonFiniteCheck, KernelRejectsAFlagThatIsNotFloat) {
  Tensor flag = Tensor::zeros({1}, kInt32);
  DPL_EXPECT_ERROR(backend::flag_non_finite(Tensor::ones({3}), flag), HasSubstr("flag_non_finite"));
}

// --- policies ----------------------------------------------------------------------------------

TEST(NonFiniteCheck, PreparedGradientsCarryTheFlagUnlessOff) {
  Generator gen(1);
  nn::MLP model(kUnits, kIn, kOut, gen);
  optim::SGD opt(0.1f);
  opt.setup(model);
  EXPECT_EQ(opt.non_finite_policy(), optim::NonFinitePolicy::kStop) << "the default";
  EXPECT_EQ(opt.prepare_gradients().size(), 2u);
  opt.set_non_finite_policy(optim::NonFinitePolicy::kOff);
  EXPECT_EQ(opt.prepare_gradients().size(), 1u);
  EXPECT_STREQ(optim::to_string(optim::NonFinitePolicy::kSkip), "skip");
}

// After an overlapped allreduce the verdict comes from the buckets' checks: the optimizer takes
// the flag it is given and reads the gradients no more (a raised flag skips finite gradients; a
// lowered one lets a NaN through, which only a wrong caller could give it).
TEST(NonFiniteCheck, AdoptedGradientsTakeTheGivenVerdictWithoutAnotherPass) {
  for (DType dtype : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Generator gen(2);
    nn::MLP model(kUnits, kIn, kOut, gen);
    auto opt = optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), dtype);
    opt->set_non_finite_policy(optim::NonFinitePolicy::kSkip);
    opt->setup(model);
    const Tensor before = model.arena().params().clone();
    const optim::GradientRanges ranges = opt->gradient_ranges();
    model.zero_grad();
    opt->backward(softmax_cross_entropy(model(Variable(make_batch(false).x.to(dtype))), make_batch(false).y));
    if (ranges.prepare) ranges.prepare(0, model.arena().numel(), nullptr);
    const std::vector<Tensor> raised = opt->adopt_prepared_gradients(Tensor::full({1}, 0.5));
    ASSERT_EQ(raised.size(), 2u);
    EXPECT_FALSE(opt->gradients_finite());
    opt->update();
    EXPECT_TRUE(opt->last_step_skipped());
    EXPECT_TRUE(same_values(model.arena().params(), before));

    model.zero_grad();
    opt->backward(softmax_cross_entropy(model(Variable(make_batch(true).x.to(dtype))), make_batch(true).y));
    if (ranges.prepare) ranges.prepare(0, model.arena().numel(), nullptr);
    static_cast<void>(opt->adopt_prepared_gradients(Tensor::zeros({1})));
    EXPECT_TRUE(opt->gradients_finite()) << "no pass of its own over the (NaN) gradients";
    if (ranges.prepare) ranges.prepare(0, model.arena().numel(), nullptr);
    DPL_EXPECT_ERROR(static_cast<void>(opt->adopt_prepared_gradients(Tensor::zeros({2}))),
                     HasSubstr("one-element float32 flag"));
  }
}

// The default: a NaN in the data stops at that iteration, names the first parameter whose
// gradient is not finite and the loss, and the step is not applied.
TEST(NonFiniteCheck, StopNamesIterationParameterAndLoss) {
  Generator gen(2);
  nn::MLP model(kUnits, kIn, kOut, gen);
  optim::Adam opt(1e-2f);
  opt.setup(model);
  step(opt, model, make_batch(false));
  step(opt, model, make_batch(false));
  const Tensor before = model.arena().params().clone();
  DPL_EXPECT_ERROR(step(opt, model, make_batch(true)),
                   AllOf(HasSubstr("iteration 3: non-finite gradient (Inf or NaN) of parameter 'l1.weight'"),
                         HasSubstr("the loss was NaN"), HasSubstr("Expected finite gradients"),
                         HasSubstr("NonFinitePolicy::kSkip")));
  EXPECT_TRUE(same_values(model.arena().params(), before)) << "the poisoned step must not be applied";
  EXPECT_EQ(opt.t(), 2);
}

// The parameter named is the first one (in registration order) with a bad element; a loop that
// calls update() itself has no loss to report.
TEST(NonFiniteCheck, StopNamesTheFirstBadParameterOfAHandWrittenLoop) {
  Generator gen(3);
  nn::MLP model(kUnits, kIn, kOut, gen);
  optim::SGD opt(0.1f);
  opt.setup(model);
  const Batch b = make_batch(false);
  opt.zero_grad();
  softmax_cross_entropy(model(Variable(b.x)), b.y).backward();
  const auto params = model.named_parameters();
  ASSERT_GE(params.size(), 4u);
  Tensor g = params[3].second.grad();
  g.narrow(0, 1, 1).fill_(std::numeric_limits<double>::infinity());
  DPL_EXPECT_ERROR(opt.update(), AllOf(HasSubstr("iteration 1: "), HasSubstr("parameter '" + params[3].first + "'"),
                                       HasSubstr("the loss was not seen")));
}

TEST(NonFiniteCheck, SkipLeavesParametersStateAndStepCountAndCountsIt) {
  Generator gen(4);
  nn::MLP model(kUnits, kIn, kOut, gen);
  optim::Adam opt(1e-2f);
  opt.set_non_finite_policy(optim::NonFinitePolicy::kSkip);
  opt.setup(model);
  step(opt, model, make_batch(false));
  const Tensor params = model.arena().params().clone();
  const Tensor m = opt.state()[0].second.clone(), v = opt.state()[1].second.clone();
  const auto scalars = opt.state_scalars();
  EXPECT_NO_THROW(step(opt, model, make_batch(true)));
  EXPECT_TRUE(opt.last_step_skipped());
  EXPECT_EQ(opt.skipped_steps(), 1);
  EXPECT_EQ(opt.t(), 1);
  EXPECT_EQ(opt.iteration(), 2);
  EXPECT_TRUE(same_values(model.arena().params(), params));
  EXPECT_TRUE(same_values(opt.state()[0].second, m));
  EXPECT_TRUE(same_values(opt.state()[1].second, v));
  EXPECT_EQ(opt.state_scalars(), scalars) << "Adam's step count must not advance either";
  step(opt, model, make_batch(false));
  EXPECT_FALSE(opt.last_step_skipped());
  EXPECT_EQ(opt.t(), 2);
  EXPECT_FALSE(same_values(model.arena().params(), params)) << "a good step after a skipped one applies";
}

// Off: no check at all, as before the check existed: the NaN reaches the weights.
TEST(NonFiniteCheck, OffAppliesWhateverComes) {
  Generator gen(5);
  nn::MLP model(kUnits, kIn, kOut, gen);
  optim::SGD opt(0.1f);
  opt.set_non_finite_policy(optim::NonFinitePolicy::kOff);
  opt.setup(model);
  EXPECT_NO_THROW(step(opt, model, make_batch(true)));
  EXPECT_EQ(opt.t(), 1);
  EXPECT_FALSE(opt.last_step_skipped());
  const auto w = model.arena().params().to_vector<float>();
  EXPECT_TRUE(std::any_of(w.begin(), w.end(), [](float x) { return std::isnan(x); }));
}

// bfloat16 masters follow the policy, checked in the pass that fills the master gradients.
TEST(NonFiniteCheck, BFloat16FollowsThePolicy) {
  Generator gen(6);
  nn::MLP model(kUnits, kIn, kOut, gen);
  auto opt = optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), kBFloat16);
  opt->setup(model);
  EXPECT_EQ(opt->actual().non_finite_policy(), optim::NonFinitePolicy::kOff)
      << "the wrapped optimizer must not check the masters a second time";
  step(*opt, model, make_batch(false), kBFloat16);
  const Tensor masters = opt->master_params().clone();
  DPL_EXPECT_ERROR(step(*opt, model, make_batch(true), kBFloat16),
                   AllOf(HasSubstr("iteration 2: "), HasSubstr("parameter 'l1.weight'"), HasSubstr("loss was NaN")));
  EXPECT_TRUE(same_values(opt->master_params(), masters));
  opt->set_non_finite_policy(optim::NonFinitePolicy::kSkip);
  EXPECT_NO_THROW(step(*opt, model, make_batch(true), kBFloat16));
  EXPECT_TRUE(opt->last_step_skipped());
  EXPECT_EQ(opt->skipped_steps(), 1);
  EXPECT_EQ(opt->t(), 1);
  EXPECT_TRUE(same_values(opt->master_params(), masters));
}

// float16: a non-finite step is an overflow of the loss scale and is skipped under every
// policy, never stopped; the scale backs off.
TEST(NonFiniteCheck, Float16OverflowSkipsEvenUnderStop) {
  Generator gen(7);
  nn::MLP model(kUnits, kIn, kOut, gen);
  auto opt = optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), kFloat16, {1024.0, 2.0, 0.5, 100});
  opt->setup(model);
  ASSERT_EQ(opt->non_finite_policy(), optim::NonFinitePolicy::kStop);
  EXPECT_FALSE(opt->stops_on_non_finite());
  step(*opt, model, make_batch(false), kFloat16);
  EXPECT_NO_THROW(step(*opt, model, make_batch(true), kFloat16));
  EXPECT_TRUE(opt->last_step_skipped());
  EXPECT_EQ(opt->loss_scale(), 512.0);
  EXPECT_EQ(opt->t(), 1);
  opt->set_non_finite_policy(optim::NonFinitePolicy::kOff);
  EXPECT_EQ(opt->prepare_gradients().size(), 2u) << "float16 keeps its overflow flag when the check is off";
}

// A float32 MixedPrecision is a pass-through: the wrapped optimizer checks and stops.
TEST(NonFiniteCheck, Float32MixedPrecisionPassesThePolicyOn) {
  Generator gen(8);
  nn::MLP model(kUnits, kIn, kOut, gen);
  auto opt = optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), kFloat32);
  opt->setup(model);
  DPL_EXPECT_ERROR(step(*opt, model, make_batch(true)),
                   AllOf(HasSubstr("iteration 1: "), HasSubstr("'l1.weight'"), HasSubstr("loss was NaN")));
  opt->set_non_finite_policy(optim::NonFinitePolicy::kSkip);
  EXPECT_EQ(opt->actual().non_finite_policy(), optim::NonFinitePolicy::kSkip);
  EXPECT_NO_THROW(step(*opt, model, make_batch(true)));
  EXPECT_EQ(opt->skipped_steps(), 1);
}

}  // namespace
}  // namespace dpl
