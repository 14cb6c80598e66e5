// Mixed precision (include/dpl/optim/mixed_precision.hpp): 16-bit models trained through float32
// master weights, float16 loss scaling and its skipped steps, the state a checkpoint carries, and
// the fused unscale kernel it runs on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/kernels.hpp"
#include "dpl/dpl.hpp"
#include "dpl/train.hpp"
#include "support/expect_error.hpp"
#include "support/temp_dir.hpp"

namespace dpl {
namespace {

using ::testing::HasSubstr;

constexpr std::int64_t kIn = 12, kUnits = 32, kClasses = 4, kBatch = 64;

// A learnable problem: the label is the largest of the first kClasses inputs.
struct Problem {
  Tensor x;
  Tensor y;
};

Problem make_problem(std::uint64_t seed) {
  Generator gen(seed);
  Problem p{Tensor::uniform({kBatch, kIn}, 0.f, 1.f, gen), Tensor::empty({kBatch}, kInt32)};
  for (std::int64_t i = 0; i < kBatch; ++i) {
    std::int32_t best = 0;
    for (std::int32_t j = 1; j < kClasses; ++j)
      if (p.x.at<float>({i, j}) > p.x.at<float>({i, best})) best = j;
    p.y.set<std::int32_t>({i}, best);
  }
  return p;
}

// The bits of a tensor as float32 values (16-bit tensors widen exactly).
std::vector<float> values(const Tensor& t) { return t.to(kFloat32).to_vector<float>(); }

Variable loss_of(nn::Module& model, const Problem& p, DType dtype) {
  return softmax_cross_entropy(model(Variable(p.x.to(dtype))), p.y);
}

// A bfloat16 model trained through float32 masters ends near the float32 run: both learn, and
// their losses after 80 Adam steps differ by less than bfloat16's rounding of the activations
// can explain away (0.05 on a loss that falls from about 1.4).
TEST(MixedPrecision, BFloat16TrainsLikeFloat32) {
  const Problem p = make_problem(3);
  Generator g32(11), g16(11);
  nn::MLP m32(kUnits, kIn, kClasses, g32), m16(kUnits, kIn, kClasses, g16);
  optim::Adam o32(1e-2f);
  auto o16 = optim::mixed_precision(std::make_unique<optim::Adam>(1e-2f), kBFloat16);
  o32.setup(m32);
  o16->setup(m16);
  const float first = o32.update([&] { return loss_of(m32, p, kFloat32); }).item();
  o16->update([&] { return loss_of(m16, p, kBFloat16); });
  float l32 = 0.f, l16 = 0.f;
  for (int step = 1; step < 80; ++step) {
    l32 = o32.update([&] { return loss_of(m32, p, kFloat32); }).item();
    l16 = o16->update([&] { return loss_of(m16, p, kBFloat16); }).item();
  }
  EXPECT_LT(l32, 0.5f * first) << "the float32 reference did not learn";
  EXPECT_LT(l16, 0.5f * first) << "the bfloat16 model did not learn";
  EXPECT_NEAR(l16, l32, 0.05f) << "bfloat16 loss " << l16 << " against float32 loss " << l32;
  EXPECT_EQ(o16->t(), 80);
  EXPECT_EQ(o16->skipped_steps(), 0);
}

// After setup and after every step: masters and optimizer state float32, the model's parameters
// (and gradients) bfloat16, and each parameter exactly its master rounded to bfloat16.
TEST(MixedPrecision, ParametersAreTheRoundedMasters) {
  const Problem p = make_problem(4);
  Generator gen(5);
  nn::MLP model(kUnits, kIn, kClasses, gen);
  const std::vector<float> initial = values(model.arena().params());
  auto opt = optim::mixed_precision(std::make_unique<optim::Adam>(1e-2f), kBFloat16);
  opt->setup(model);
  EXPECT_EQ(values(opt->master_params()), initial) << "the masters must start as the float32 weights, exactly";
  for (int step = 0; step < 4; ++step) {
    if (step > 0) opt->update([&] { return loss_of(model, p, kBFloat16); });
    const nn::ParameterArena& arena = model.arena();
    EXPECT_EQ(arena.dtype(), kBFloat16) << "step " << step;
    EXPECT_EQ(arena.grads().dtype(), kBFloat16) << "step " << step;
    for (const auto& [name, var] : model.named_parameters()) EXPECT_EQ(var.dtype(), kBFloat16) << name;
    EXPECT_EQ(opt->master_params().dtype(), kFloat32);
    EXPECT_EQ(opt->master_grads().dtype(), kFloat32);
    for (const auto& [name, t] : opt->state()) EXPECT_EQ(t.dtype(), kFloat32) << "state " << name;
    EXPECT_EQ(values(arena.params()), values(opt->master_params().to(kBFloat16))) << "step " << step;
  }
  // The masters keep what bfloat16 cannot hold: small Adam steps accumulate below its precision.
  EXPECT_NE(values(opt->master_params()), values(model.arena().params()));
  // No overflow flag (no loss scaling), but the non-finite check's flag, raised in the same pass.
  EXPECT_EQ(opt->prepare_gradients().size(), 2u) << "bfloat16 carries the non-finite check's flag";
  opt->set_non_finite_policy(optim::NonFinitePolicy::kOff);
  EXPECT_EQ(opt->prepare_gradients().size(), 1u) << "bfloat16 with the check off has no flag to agree on";
}

// BatchNorm's affine parameters go 16-bit with the rest (one arena), its running statistics stay
// float32 buffers, and a step trains through it.
TEST(MixedPrecision, BatchNormKeepsFloat32Statistics) {
  Generator gen(8);
  auto bn = std::make_shared<nn::BatchNorm2d>(3);
  nn::Sequential model(bn, nn::Flatten(), nn::Linear(3 * 2 * 2, 2, true, gen));
  auto opt = optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), kFloat16);
  opt->setup(model);
  EXPECT_EQ(bn->weight().dtype(), kFloat16);
  EXPECT_EQ(bn->bias().dtype(), kFloat16);
  const Tensor x = Tensor::normal({4, 3, 2, 2}, 1.f, 2.f, gen).to(kFloat16);
  const Tensor y = Tensor::from_vector<std::int32_t>({0, 1, 1, 0}, {4});
  for (int step = 0; step < 3; ++step) opt->update([&] { return softmax_cross_entropy(model(Variable(x)), y); });
  EXPECT_EQ(bn->running_mean().dtype(), kFloat32);
  EXPECT_EQ(bn->running_var().dtype(), kFloat32);
  // Three batches of mean about 1 moved the running mean off its initial 0.
  for (float m : bn->running_mean().to_vector<float>()) EXPECT_GT(m, 0.1f);
  EXPECT_GE(opt->t(), 1);
  EXPECT_NE(values(bn->weight().data()), std::vector<float>(3, 1.f)) << "the scale was not trained";
}

// A float16 loss carries its gradient in float16, where 2^16 is Inf: the first step at the
// default scale overflows, is skipped, and the scale backs off to 2^15, which then works.
TEST(MixedPrecision, Float16LossBacksOffFromTheDefaultScale) {
  const Problem p = make_problem(6);
  Generator gen(7);
  nn::MLP model(kUnits, kIn, kClasses, gen);
  auto opt = optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), kFloat16);
  opt->setup(model);
  EXPECT_EQ(opt->loss_scale(), 65536.0);
  opt->update([&] { return loss_of(model, p, kFloat16); });
  EXPECT_TRUE(opt->last_step_skipped());
  EXPECT_EQ(opt->loss_scale(), 32768.0);
  EXPECT_EQ(opt->t(), 0);
  opt->update([&] { return loss_of(model, p, kFloat16); });
  EXPECT_FALSE(opt->last_step_skipped());
  EXPECT_EQ(opt->t(), 1);
  EXPECT_EQ(opt->loss_scale(), 32768.0);
}

struct Snapshot {
  std::vector<float> params, masters;
  std::vector<std::vector<float>> state;
  std::int64_t t;
};

Snapshot snapshot(nn::Module& model, const optim::MixedPrecision& opt) {
  Snapshot s{values(model.arena().params()), values(opt.master_params()), {}, opt.t()};
  for (const auto& [name, t] : opt.state()) s.state.push_back(values(t));
  return s;
}

// An Inf in one gradient skips the step: parameters, masters, Adam's moments and t stay as they
// were, the scale halves and the count of good steps restarts; the next clean step goes ahead.
TEST(MixedPrecision, OverflowSkipsTheStep) {
  const Problem p = make_problem(9);
  Generator gen(10);
  nn::MLP model(kUnits, kIn, kClasses, gen);
  auto opt = optim::mixed_precision(std::make_unique<optim::Adam>(1e-2f), kFloat16, {1024.0, 2.0, 0.5, 100});
  opt->setup(model);
  opt->update([&] { return loss_of(model, p, kFloat16); });
  opt->update([&] { return loss_of(model, p, kFloat16); });
  ASSERT_EQ(opt->t(), 2);
  ASSERT_EQ(opt->good_steps(), 2);
  const Snapshot before = snapshot(model, *opt);

  opt->zero_grad();
  opt->backward(loss_of(model, p, kFloat16));
  Tensor poisoned = model.arena().grads().narrow(0, 5, 1);
  poisoned.fill_(std::numeric_limits<double>::infinity());
  opt->update();

  EXPECT_TRUE(opt->last_step_skipped());
  EXPECT_EQ(opt->skipped_steps(), 1);
  EXPECT_EQ(opt->loss_scale(), 512.0);
  EXPECT_EQ(opt->good_steps(), 0);
  const Snapshot after = snapshot(model, *opt);
  EXPECT_EQ(after.t, before.t);
  EXPECT_EQ(after.params, before.params);
  EXPECT_EQ(after.masters, before.masters);
  ASSERT_EQ(after.state.size(), before.state.size());
  for (std::size_t i = 0; i < after.state.size(); ++i) EXPECT_EQ(after.state[i], before.state[i]) << "state " << i;

  // A NaN skips the step just as well.
  opt->zero_grad();
  opt->backward(loss_of(model, p, kFloat16));
  poisoned = model.arena().grads().narrow(0, 0, 1);
  poisoned.fill_(std::numeric_limits<double>::quiet_NaN());
  opt->update();
  EXPECT_TRUE(opt->last_step_skipped());
  EXPECT_EQ(opt->loss_scale(), 256.0);

  opt->update([&] { return loss_of(model, p, kFloat16); });
  EXPECT_FALSE(opt->last_step_skipped());
  EXPECT_EQ(opt->t(), 3);
  EXPECT_NE(values(model.arena().params()), before.params);
}

// The scale grows by growth_factor after growth_interval good steps in a row, and only then.
TEST(MixedPrecision, ScaleGrowsAfterTheGrowthInterval) {
  const Problem p = make_problem(12);
  Generator gen(13);
  nn::MLP model(kUnits, kIn, kClasses, gen);
  auto opt = optim::mixed_precision(std::make_unique<optim::SGD>(0.05f), kFloat16, {64.0, 2.0, 0.5, 3});
  opt->setup(model);
  const std::vector<double> want_scale = {64, 64, 128, 128, 128, 256};
  const std::vector<std::int64_t> want_good = {1, 2, 0, 1, 2, 0};
  for (std::size_t i = 0; i < want_scale.size(); ++i) {
    opt->update([&] { return loss_of(model, p, kFloat16); });
    ASSERT_FALSE(opt->last_step_skipped()) << "step " << i;
    EXPECT_EQ(opt->loss_scale(), want_scale[i]) << "after step " << i;
    EXPECT_EQ(opt->good_steps(), want_good[i]) << "after step " << i;
  }
  EXPECT_EQ(opt->prepare_gradients().size(), 2u) << "float16 also hands over its overflow flag";
}

// The state exported after a few steps, loaded into a fresh optimizer on a fresh copy of the
// model, continues the run bit for bit: masters, moments, t and the loss scale all come back.
TEST(MixedPrecision, StateRoundTripContinuesExactly) {
  const Problem p = make_problem(14);
  const optim::LossScaling scaling{2048.0, 2.0, 0.5, 4};
  Generator ga(15);
  nn::MLP a(kUnits, kIn, kClasses, ga);
  auto oa = optim::mixed_precision(std::make_unique<optim::Adam>(1e-2f), kFloat16, scaling);
  oa->setup(a);
  for (int step = 0; step < 6; ++step) oa->update([&] { return loss_of(a, p, kFloat16); });
  const auto scalars = oa->state_scalars();
  EXPECT_EQ(scalars.at("loss_scale"), oa->loss_scale());
  EXPECT_EQ(scalars.at("loss_scale_good_steps"), static_cast<double>(oa->good_steps()));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : oa->state()) tensors.emplace_back(name, t.clone());

  Generator gb(99);  // other weights: load_state must replace them
  nn::MLP b(kUnits, kIn, kClasses, gb);
  auto ob = optim::mixed_precision(std::make_unique<optim::Adam>(1e-2f), kFloat16, scaling);
  ob->setup(b);
  ob->load_state(tensors, scalars);
  EXPECT_EQ(ob->t(), oa->t());
  EXPECT_EQ(ob->loss_scale(), oa->loss_scale());
  EXPECT_EQ(ob->good_steps(), oa->good_steps());
  EXPECT_EQ(values(b.arena().params()), values(a.arena().params())) << "the model gets its masters, rounded";
  for (int step = 0; step < 3; ++step) {
    oa->update([&] { return loss_of(a, p, kFloat16); });
    ob->update([&] { return loss_of(b, p, kFloat16); });
  }
  EXPECT_EQ(values(ob->master_params()), values(oa->master_params()));
  EXPECT_EQ(ob->loss_scale(), oa->loss_scale());
  EXPECT_EQ(ob->t(), oa->t());
}

// Through a checkpoint file: the 16-bit model, the masters under optimizer/master and the loss
// scale among the optimizer's scalars come back, and the resumed run matches the straight one.
TEST(MixedPrecision, CheckpointResumesTheSameRun) {
  const test::TempDir dir("dpl_mixed_ckpt");
  const Problem p = make_problem(22);
  const optim::LossScaling scaling{4096.0, 2.0, 0.5, 3};
  Generator ga(23);
  nn::MLP a(kUnits, kIn, kClasses, ga);
  auto oa = optim::mixed_precision(std::make_unique<optim::MomentumSGD>(0.05f, 0.9f), kFloat16, scaling);
  oa->setup(a);
  for (int step = 0; step < 5; ++step) oa->update([&] { return loss_of(a, p, kFloat16); });
  train::TrainingState saved;
  saved.model = &a;
  saved.optimizer = oa.get();
  train::save_checkpoint(dir.file("ckpt.safetensors"), saved);
  const auto file = serialize::load_safetensors(dir.file("ckpt.safetensors"));
  bool has_master = false;
  for (const auto& [name, t] : file.tensors)
    if (name == "optimizer/master") has_master = t.dtype() == kFloat32;
  EXPECT_TRUE(has_master) << "the checkpoint must hold the float32 masters as optimizer/master";

  Generator gb(24);
  nn::MLP b(kUnits, kIn, kClasses, gb);
  auto ob = optim::mixed_precision(std::make_unique<optim::MomentumSGD>(0.05f, 0.9f), kFloat16, scaling);
  ob->setup(b);
  train::TrainingState restored;
  restored.model = &b;
  restored.optimizer = ob.get();
  train::load_checkpoint(dir.file("ckpt.safetensors"), restored);
  EXPECT_EQ(ob->loss_scale(), oa->loss_scale());
  EXPECT_EQ(ob->good_steps(), oa->good_steps());
  for (int step = 0; step < 3; ++step) {
    oa->update([&] { return loss_of(a, p, kFloat16); });
    ob->update([&] { return loss_of(b, p, kFloat16); });
  }
  EXPECT_EQ(values(ob->master_params()), values(oa->master_params()));
  EXPECT_EQ(values(b.arena().params()), values(a.arena().params()));
  EXPECT_EQ(ob->t(), oa->t());
}

// A bad state is refused whole, naming what is wrong, and leaves the optimizer as it was.
TEST(MixedPrecision, LoadStateChecksBeforeChanging) {
  Generator gen(16);
  nn::MLP model(kUnits, kIn, kClasses, gen);
  auto opt = optim::mixed_precision(std::make_unique<optim::Adam>(), kFloat16);
  opt->setup(model);
  auto tensors = opt->state();
  auto scalars = opt->state_scalars();
  const std::vector<float> masters = values(opt->master_params());

  std::vector<std::pair<std::string, Tensor>> no_master;
  for (const auto& e : tensors)
    if (e.first != "master") no_master.push_back(e);
  DPL_EXPECT_ERROR(opt->load_state(no_master, scalars), HasSubstr("missing state tensor 'master'"));

  auto bad_scale = scalars;
  bad_scale["loss_scale"] = 0.0;
  bad_scale["t"] = 7.0;
  DPL_EXPECT_ERROR(opt->load_state(tensors, bad_scale), HasSubstr("\"loss_scale\" finite and > 0, got 0"));
  auto no_scale = scalars;
  no_scale.erase("loss_scale_good_steps");
  DPL_EXPECT_ERROR(opt->load_state(tensors, no_scale), HasSubstr("missing state scalar 'loss_scale_good_steps'"));
  auto bad_inner = scalars;
  bad_inner["beta1"] = 0.5;
  DPL_EXPECT_ERROR(opt->load_state(tensors, bad_inner), HasSubstr("beta1"));
  EXPECT_EQ(opt->t(), 0);
  EXPECT_EQ(opt->loss_scale(), 65536.0);
  EXPECT_EQ(values(opt->master_params()), masters);
}

// float32 is a pass-through: the same steps as the wrapped optimizer alone, bit for bit.
TEST(MixedPrecision, Float32IsThePlainOptimizer) {
  const Problem p = make_problem(17);
  Generator g1(18), g2(18);
  nn::MLP m1(kUnits, kIn, kClasses, g1), m2(kUnits, kIn, kClasses, g2);
  optim::MomentumSGD plain(0.05f, 0.9f);
  auto mixed = optim::mixed_precision(std::make_unique<optim::MomentumSGD>(0.05f, 0.9f), kFloat32);
  plain.setup(m1);
  mixed->setup(m2);
  for (int step = 0; step < 3; ++step) {
    plain.update([&] { return loss_of(m1, p, kFloat32); });
    mixed->update([&] { return loss_of(m2, p, kFloat32); });
  }
  EXPECT_EQ(m2.arena().dtype(), kFloat32);
  EXPECT_EQ(values(m2.arena().params()), values(m1.arena().params()));
  EXPECT_EQ(mixed->state().size(), plain.state().size()) << "no masters: the parameters are float32 already";
}

// Clipping added to the mixed precision optimizer sees the float32 master gradients, unscaled:
// the norm it reports does not depend on the loss scale.
TEST(MixedPrecision, HooksSeeUnscaledMasterGradients) {
  const Problem p = make_problem(19);
  std::vector<double> norms;
  for (double scale : {128.0, 4096.0}) {
    Generator gen(20);
    nn::MLP model(kUnits, kIn, kClasses, gen);
    auto opt = optim::mixed_precision(std::make_unique<optim::SGD>(0.1f), kFloat16, {scale, 2.0, 0.5, 100});
    auto clip = optim::clip_gradients(*opt, 1e6);
    opt->setup(model);
    opt->update([&] { return loss_of(model, p, kFloat16); });
    norms.push_back(clip->last_norm());
  }
  EXPECT_GT(norms[0], 0.0);
  EXPECT_NEAR(norms[1], norms[0], 0.02 * norms[0]) << "the clipping norm changed with the loss scale";
}

TEST(MixedPrecision, RejectsBadSettings) {
  DPL_EXPECT_ERROR(optim::mixed_precision(nullptr, kBFloat16), HasSubstr("the wrapped optimizer is null"));
  DPL_EXPECT_ERROR(optim::mixed_precision(std::make_unique<optim::SGD>(), kInt32),
                   HasSubstr("expected a compute dtype float32, bfloat16 or float16, got int32"));
  DPL_EXPECT_ERROR(optim::mixed_precision(std::make_unique<optim::SGD>(), kFloat16, {0.0, 2.0, 0.5, 10}),
                   HasSubstr("expected a finite init_scale > 0, got 0"));
  DPL_EXPECT_ERROR(optim::mixed_precision(std::make_unique<optim::SGD>(), kFloat16, {1.0, 1.0, 0.5, 10}),
                   HasSubstr("expected a finite growth_factor > 1, got 1"));
  DPL_EXPECT_ERROR(optim::mixed_precision(std::make_unique<optim::SGD>(), kFloat16, {1.0, 2.0, 1.0, 10}),
                   HasSubstr("expected a backoff_factor in (0, 1), got 1"));
  DPL_EXPECT_ERROR(optim::mixed_precision(std::make_unique<optim::SGD>(), kFloat16, {1.0, 2.0, 0.5, 0}),
                   HasSubstr("expected a growth_interval >= 1 step, got 0"));
}

// Parameters replaced after setup leave the masters describing another model: refused loudly.
TEST(MixedPrecision, ParametersChangedAfterSetupNeedSetupAgain) {
  Generator gen(21);
  nn::Linear model(3, 2, true, gen);
  auto opt = optim::mixed_precision(std::make_unique<optim::SGD>(), kBFloat16);
  opt->setup(model);
  Variable w = model.weight();
  w.set_data(Tensor::zeros({2, 3}, kBFloat16));
  DPL_EXPECT_ERROR(opt->update(), HasSubstr("the model's parameters changed after setup()"));
  opt->setup(model);
  EXPECT_NO_THROW(opt->update());
}

// The fused kernel: master = grad * inv_scale in float32 from each dtype, and the flag set by
// Inf or NaN, or by a product that overflows, and otherwise left alone.
TEST(MixedPrecision, UnscaleKernel) {
  const std::vector<float> in = {2.f, -4.f, 0.5f, 0.f, 1024.f};
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    const Tensor g = Tensor::from_vector<float>(in, {5}).to(dt);
    Tensor master = Tensor::empty({5}, kFloat32);
    Tensor flag = Tensor::zeros({1}, kFloat32);
    backend::unscale_grads(g, 0.25f, master, flag);
    EXPECT_EQ(master.to_vector<float>(), (std::vector<float>{0.5f, -1.f, 0.125f, 0.f, 256.f})) << dt;
    EXPECT_EQ(flag.item(), 0.f) << dt;
    Tensor bad = Tensor::from_vector<float>({1.f, std::numeric_limits<float>::infinity(), 2.f}, {3}).to(dt);
    Tensor m3 = Tensor::empty({3}, kFloat32);
    backend::unscale_grads(bad, 1.f, m3, flag);
    EXPECT_EQ(flag.item(), 1.f) << dt;
    // Clean input leaves a raised flag raised: one flag can cover several buffers.
    backend::unscale_grads(g, 1.f, master, flag);
    EXPECT_EQ(flag.item(), 1.f) << dt;
  }
  Tensor flag = Tensor::zeros({1}, kFloat32);
  const Tensor nan = Tensor::from_vector<float>({std::nanf("")}, {1}).to(kFloat16);
  Tensor m1 = Tensor::empty({1}, kFloat32);
  backend::unscale_grads(nan, 1.f, m1, flag);
  EXPECT_EQ(flag.item(), 1.f) << "NaN";
  flag.fill_(0.0);
  const Tensor big = Tensor::from_vector<float>({3e38f}, {1});
  backend::unscale_grads(big, 4.f, m1, flag);
  EXPECT_EQ(flag.item(), 1.f) << "a product beyond float32's range";
}

}  // namespace
}  // namespace dpl
