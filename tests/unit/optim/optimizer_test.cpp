// Optimizers against their formulas (include/dpl/optim/optimizer.hpp), written out here in double
// precision, on a tiny model whose gradients the tests set by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointwise;

// Two parameters, so the update must cover more than one arena entry: sorted, "b" (2,) comes at
// offset 0 and "w" (3,) at offset 16.
class Tiny : public nn::Module {
 public:
  Tiny() {
    b_ = register_parameter("b", Tensor::from_vector<float>({0.3f, -0.1f}, {2}));
    w_ = register_parameter("w", Tensor::from_vector<float>({1.0f, -2.0f, 0.5f}, {3}));
  }
  Variable forward(const Variable& x) override { return mul(add(x, b_), w_); }
  Variable grow(const std::string& name, Tensor value) { return register_parameter(name, std::move(value)); }
  Variable b_, w_;
};

// Hand-set gradients for steps 1..3, in the flat order b0 b1 w0 w1 w2.
const std::vector<std::vector<double>> kGrads = {
    {0.1, -0.3, 0.5, -1.0, 2.0},
    {0.2, 0.05, -0.2, 0.4, 1.0},
    {-0.7, 0.6, 1.5, 0.25, -0.5},
};
const std::vector<double> kInitial = {0.3, -0.1, 1.0, -2.0, 0.5};

void set_grads(Tiny& m, int step) {
  const auto& g = kGrads[static_cast<std::size_t>(step)];
  // The gradients are views of the model's gradient arena; copying into them fills the arena.
  Tensor gb = m.b_.grad(), gw = m.w_.grad();
  gb.copy_(Tensor::from_vector<float>({static_cast<float>(g[0]), static_cast<float>(g[1])}, {2}));
  gw.copy_(Tensor::from_vector<float>({static_cast<float>(g[2]), static_cast<float>(g[3]), static_cast<float>(g[4])}, {3}));
}

std::vector<double> params_of(const Tiny& m) {
  std::vector<double> out;
  for (float v : m.b_.data().to_vector<float>()) out.push_back(v);
  for (float v : m.w_.data().to_vector<float>()) out.push_back(v);
  return out;
}

// The b and w slices of a tensor with the arena's layout.
std::vector<double> entries_of(const Tensor& arena_like, const nn::ParameterArena& arena) {
  std::vector<double> out;
  const auto v = arena_like.to_vector<float>();
  for (const auto& e : arena.entries())
    for (std::int64_t i = 0; i < e.numel; ++i) out.push_back(v[static_cast<std::size_t>(e.offset + i)]);
  return out;
}

void expect_padding_zero(const Tensor& arena_like, const nn::ParameterArena& arena, const char* what) {
  const auto v = arena_like.to_vector<float>();
  std::vector<bool> used(v.size(), false);
  for (const auto& e : arena.entries())
    for (std::int64_t i = 0; i < e.numel; ++i) used[static_cast<std::size_t>(e.offset + i)] = true;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!used[i]) {
      EXPECT_EQ(v[i], 0.f) << what << " padding element " << i;
    }
}

// Float32 kernels against double references over three steps of O(1) values.
constexpr double kTol = 2e-6;

// --- reference formulas, double precision ------------------------------------------------------

struct SgdRef {
  double lr, wd;
  std::vector<double> p = kInitial;
  void step(const std::vector<double>& g) {
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= lr * (g[i] + wd * p[i]);
  }
};

struct MomentumRef {
  double lr, momentum, wd;
  std::vector<double> p = kInitial, v = std::vector<double>(kInitial.size(), 0.0);
  void step(const std::vector<double>& g) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      v[i] = momentum * v[i] - lr * (g[i] + wd * p[i]);
      p[i] += v[i];
    }
  }
};

struct AdamRef {
  double alpha, beta1, beta2, eps, wd;
  int t = 0;
  std::vector<double> p = kInitial, m = std::vector<double>(kInitial.size(), 0.0),
                      v = std::vector<double>(kInitial.size(), 0.0);
  void step(const std::vector<double>& g) {
    ++t;
    const double lr_t = alpha * std::sqrt(1 - std::pow(beta2, t)) / (1 - std::pow(beta1, t));
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double gi = g[i] + wd * p[i];
      m[i] += (1 - beta1) * (gi - m[i]);
      v[i] += (1 - beta2) * (gi * gi - v[i]);
      p[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
  }
};

// --- SGD -----------------------------------------------------------------------------------------

TEST(SGD, FirstStepByHand) {
  Tiny model;
  optim::SGD opt(0.1f);
  opt.setup(model);
  set_grads(model, 0);
  opt.update();
  // p - 0.1 g for g = (0.1, -0.3, 0.5, -1, 2).
  EXPECT_THAT(params_of(model), Pointwise(DoubleNear(kTol), std::vector<double>{0.29, -0.07, 0.95, -1.9, 0.3}));
  EXPECT_EQ(opt.t(), 1);
}

TEST(SGD, ThreeStepsFollowTheFormula) {
  for (float wd : {0.f, 0.05f}) {
    SCOPED_TRACE(::testing::Message() << "weight decay " << wd);
    Tiny model;
    optim::SGD opt(0.1f);
    opt.set_weight_decay(wd);
    opt.setup(model);
    SgdRef ref{0.1, static_cast<double>(wd)};
    for (int s = 0; s < 3; ++s) {
      set_grads(model, s);
      opt.update();
      ref.step(kGrads[s]);
      EXPECT_THAT(params_of(model), Pointwise(DoubleNear(kTol), ref.p)) << "after step " << s + 1;
    }
    EXPECT_TRUE(opt.state().empty());
  }
}

TEST(SGD, WeightDecayByHand) {
  Tiny model;
  optim::SGD opt(0.5f);
  opt.set_weight_decay(0.1f);
  EXPECT_FLOAT_EQ(opt.weight_decay(), 0.1f);
  opt.setup(model);
  model.zero_grad();
  opt.update();
  // With zero gradients only the decay acts: p * (1 - 0.5 * 0.1).
  EXPECT_THAT(params_of(model), Pointwise(DoubleNear(kTol), std::vector<double>{0.285, -0.095, 0.95, -1.9, 0.475}));
  DPL_EXPECT_ERROR(opt.set_weight_decay(-1.f), AllOf(HasSubstr("weight_decay"), HasSubstr("-1")));
}

// --- MomentumSGD ---------------------------------------------------------------------------------

TEST(MomentumSGD, TwoStepsByHand) {
  Tiny model;
  optim::MomentumSGD opt(0.1f, 0.9f);
  opt.setup(model);
  set_grads(model, 0);
  opt.update();
  // v1 = -0.1 g1; p1 = p0 + v1.
  EXPECT_THAT(params_of(model), Pointwise(DoubleNear(kTol), std::vector<double>{0.29, -0.07, 0.95, -1.9, 0.3}));
  set_grads(model, 1);
  opt.update();
  // v2 = 0.9 v1 - 0.1 g2 = (-0.009 - 0.02, 0.027 - 0.005, -0.045 + 0.02, 0.09 - 0.04, -0.18 - 0.1).
  EXPECT_THAT(params_of(model),
              Pointwise(DoubleNear(kTol), std::vector<double>{0.29 - 0.029, -0.07 + 0.022, 0.95 - 0.025, -1.9 + 0.05,
                                                               0.3 - 0.28}));
}

TEST(MomentumSGD, ThreeStepsFollowTheFormulaAndVelocityIsAnArena) {
  for (float wd : {0.f, 0.05f}) {
    SCOPED_TRACE(::testing::Message() << "weight decay " << wd);
    Tiny model;
    optim::MomentumSGD opt(0.05f, 0.8f);
    opt.set_weight_decay(wd);
    opt.setup(model);
    MomentumRef ref{0.05, 0.8, static_cast<double>(wd)};
    for (int s = 0; s < 3; ++s) {
      set_grads(model, s);
      opt.update();
      ref.step(kGrads[s]);
      EXPECT_THAT(params_of(model), Pointwise(DoubleNear(kTol), ref.p)) << "after step " << s + 1;
    }
    const auto state = opt.state();
    ASSERT_EQ(state.size(), 1u);
    EXPECT_EQ(state[0].first, "velocity");
    const nn::ParameterArena& arena = model.arena();
    EXPECT_EQ(state[0].second.shape(), arena.params().shape());
    EXPECT_THAT(entries_of(state[0].second, arena), Pointwise(DoubleNear(kTol), ref.v));
    expect_padding_zero(state[0].second, arena, "velocity");
    expect_padding_zero(arena.params(), arena, "params");
  }
}

TEST(MomentumSGD, RejectsBadHyperparameters) {
  DPL_EXPECT_ERROR(optim::MomentumSGD(0.1f, 1.f), AllOf(HasSubstr("MomentumSGD"), HasSubstr("[0, 1)")));
  DPL_EXPECT_ERROR(optim::MomentumSGD(-0.1f), AllOf(HasSubstr("MomentumSGD"), HasSubstr("-0.1")));
}

// --- Adam ----------------------------------------------------------------------------------------

TEST(Adam, FirstStepMovesEachParameterByAlpha) {
  Tiny model;
  optim::Adam opt(0.01f);
  opt.setup(model);
  set_grads(model, 0);
  opt.update();
  // After one step m/sqrt(v) = g/|g| exactly (bias corrections cancel), so p1 = p0 - alpha sign(g)
  // up to eps/sqrt(v) ~ 1e-6 relative.
  EXPECT_THAT(params_of(model), Pointwise(DoubleNear(kTol), std::vector<double>{0.29, -0.09, 0.99, -1.99, 0.49}));
}

TEST(Adam, GradientsWhoseSquaresAreSubnormalKeepTheParametersFinite) {
  // 1e-20 squared is 1e-40, below the smallest normal float: the second moment is subnormal.
  // A square root taken through a reciprocal estimate turned that into a NaN parameter.
  Tiny model;
  optim::Adam opt(0.01f);
  opt.setup(model);
  for (int step = 0; step < 3; ++step) {
    model.zero_grad();
    Tensor gb = model.b_.grad(), gw = model.w_.grad();
    gb.fill_(1e-20);
    gw.fill_(-1e-20);
    opt.update();
  }
  const std::vector<double> p = params_of(model);
  for (std::size_t i = 0; i < p.size(); ++i) {
    EXPECT_TRUE(std::isfinite(p[i])) << "parameter " << i;
    EXPECT_NEAR(p[i], kInitial[i], 1e-6) << "parameter " << i;  // m / (sqrt(v) + eps) ~ 1e-12
  }
}

TEST(Adam, ThreeStepsFollowTheFormulaAndMomentsAreArenas) {
  for (float wd : {0.f, 0.05f}) {
    SCOPED_TRACE(::testing::Message() << "weight decay " << wd);
    Tiny model;
    optim::Adam opt(0.02f, 0.8f, 0.95f, 1e-3f);  // a large eps so that its place in the formula matters
    opt.set_weight_decay(wd);
    opt.setup(model);
    AdamRef ref{0.02, 0.8, 0.95, 1e-3, static_cast<double>(wd)};
    for (int s = 0; s < 3; ++s) {
      set_grads(model, s);
      opt.update();
      ref.step(kGrads[s]);
      EXPECT_THAT(params_of(model), Pointwise(DoubleNear(kTol), ref.p)) << "after step " << s + 1;
    }
    EXPECT_EQ(opt.t(), 3);
    const auto state = opt.state();
    ASSERT_EQ(state.size(), 2u);
    EXPECT_EQ(state[0].first, "m");
    EXPECT_EQ(state[1].first, "v");
    const nn::ParameterArena& arena = model.arena();
    for (const auto& s : state) EXPECT_EQ(s.second.shape(), arena.params().shape()) << s.first;
    EXPECT_THAT(entries_of(state[0].second, arena), Pointwise(DoubleNear(kTol), ref.m));
    EXPECT_THAT(entries_of(state[1].second, arena), Pointwise(DoubleNear(kTol), ref.v));
    expect_padding_zero(state[0].second, arena, "m");
    expect_padding_zero(state[1].second, arena, "v");
    expect_padding_zero(arena.params(), arena, "params");
  }
}

TEST(Adam, DefaultsAreChainers) {
  optim::Adam opt;
  EXPECT_FLOAT_EQ(opt.lr(), 1e-3f);
  EXPECT_FLOAT_EQ(opt.beta1(), 0.9f);
  EXPECT_FLOAT_EQ(opt.beta2(), 0.999f);
  EXPECT_FLOAT_EQ(opt.eps(), 1e-8f);
  EXPECT_FLOAT_EQ(opt.weight_decay(), 0.f);
  DPL_EXPECT_ERROR(optim::Adam(1e-3f, 1.f), AllOf(HasSubstr("Adam"), HasSubstr("beta1=1")));
  DPL_EXPECT_ERROR(optim::Adam(1e-3f, 0.9f, 0.999f, 0.f), AllOf(HasSubstr("Adam"), HasSubstr("eps")));
}

// --- shared behaviour ----------------------------------------------------------------------------

TEST(Optimizer, SetLrTakesEffectOnTheNextStep) {
  Tiny model;
  optim::SGD sgd(0.1f);
  sgd.setup(model);
  SgdRef ref{0.1, 0.0};
  set_grads(model, 0);
  sgd.update();
  ref.step(kGrads[0]);
  sgd.set_lr(0.5f);
  EXPECT_FLOAT_EQ(sgd.lr(), 0.5f);
  ref.lr = 0.5;
  set_grads(model, 1);
  sgd.update();
  ref.step(kGrads[1]);
  EXPECT_THAT(params_of(model), Pointwise(DoubleNear(kTol), ref.p));
  DPL_EXPECT_ERROR(sgd.set_lr(-1.f), AllOf(HasSubstr("SGD"), HasSubstr("-1")));
  DPL_EXPECT_ERROR(sgd.set_lr(std::nanf("")), HasSubstr("finite"));

  Tiny model2;
  optim::Adam adam(0.01f);
  adam.setup(model2);
  AdamRef aref{0.01, 0.9, 0.999, 1e-8, 0.0};
  set_grads(model2, 0);
  adam.update();
  aref.step(kGrads[0]);
  adam.set_lr(0.03f);
  aref.alpha = 0.03;
  set_grads(model2, 1);
  adam.update();
  aref.step(kGrads[1]);
  EXPECT_THAT(params_of(model2), Pointwise(DoubleNear(kTol), aref.p));

  Tiny model3;
  optim::MomentumSGD mom(0.1f, 0.5f);
  mom.setup(model3);
  MomentumRef mref{0.1, 0.5, 0.0};
  set_grads(model3, 0);
  mom.update();
  mref.step(kGrads[0]);
  mom.set_lr(0.2f);
  mref.lr = 0.2;
  set_grads(model3, 1);
  mom.update();
  mref.step(kGrads[1]);
  EXPECT_THAT(params_of(model3), Pointwise(DoubleNear(kTol), mref.p));
}

TEST(Optimizer, UpdateWithALossFunctionClearsGradientsFirst) {
  // loss = sum(w*w) + sum(b*b): every step scales the parameters by (1 - 2 lr).
  Tiny model;
  optim::SGD opt(0.1f);
  opt.setup(model);
  std::vector<double> expected = kInitial;
  for (int s = 0; s < 3; ++s) {
    const Variable loss =
        opt.update([&] { return add(sum(mul(model.w_, model.w_)), sum(mul(model.b_, model.b_))); });
    double l = 0;
    for (double& p : expected) {
      l += p * p;
      p *= 0.8;
    }
    EXPECT_NEAR(loss.item(), l, 1e-5) << "the loss before step " << s + 1;
  }
  EXPECT_THAT(params_of(model), Pointwise(DoubleNear(kTol), expected));
  EXPECT_EQ(opt.t(), 3);
}

TEST(Optimizer, SetupResetsStepCountAndState) {
  Tiny model;
  optim::MomentumSGD opt(0.1f, 0.9f);
  opt.setup(model);
  set_grads(model, 0);
  opt.update();
  opt.update();
  EXPECT_EQ(opt.t(), 2);
  opt.setup(model);
  EXPECT_EQ(opt.t(), 0);
  for (float v : opt.state()[0].second.to_vector<float>()) EXPECT_EQ(v, 0.f);
}

TEST(Optimizer, RepackingTheModelResetsTheState) {
  Tiny model;
  optim::MomentumSGD opt(0.1f, 0.9f);
  opt.setup(model);
  set_grads(model, 0);
  opt.update();
  // Replacing a parameter's data changes the arena; the old velocity no longer applies.
  model.w_.set_data(Tensor::from_vector<float>({1.0f, -2.0f, 0.5f}, {3}));
  model.b_.set_data(Tensor::from_vector<float>({0.3f, -0.1f}, {2}));
  bool repacked = false;
  model.arena(&repacked);
  ASSERT_TRUE(repacked);
  set_grads(model, 0);
  opt.update();
  // Exactly the first step again: v = -lr g, no carried momentum.
  EXPECT_THAT(params_of(model), Pointwise(DoubleNear(kTol), std::vector<double>{0.29, -0.07, 0.95, -1.9, 0.3}));
}

TEST(Optimizer, StateFollowsTheArenaWhenAParameterIsAdded) {
  Tiny model;
  optim::Adam opt(0.01f);
  opt.setup(model);
  set_grads(model, 0);
  opt.update();  // b = (0.29, -0.09), w = (0.99, -1.99, 0.49), and m, v are non-zero
  const Variable c = model.grow("c", Tensor::full({40}, 1.0));
  // update(loss_fn) clears the gradients first, which repacks the arena before the step runs.
  opt.update([&] { return add(sum(mul(c, c)), sum(mul(model.w_, model.w_))); });
  const nn::ParameterArena& arena = model.arena();
  EXPECT_EQ(arena.numel(), 16 + 48 + 16);
  for (const auto& s : opt.state()) EXPECT_EQ(s.second.shape(), arena.params().shape()) << s.first;
  // A fresh state makes this a first Adam step for every parameter: each moves by alpha against
  // its gradient's sign, and b, whose gradient is zero, stays where it was.
  for (float v : c.data().to_vector<float>()) EXPECT_NEAR(v, 0.99f, 1e-6f);
  EXPECT_THAT(params_of(model), Pointwise(DoubleNear(kTol), std::vector<double>{0.29, -0.09, 0.98, -1.98, 0.48}));
}

TEST(Optimizer, UseBeforeSetupThrows) {
  optim::SGD opt;
  DPL_EXPECT_ERROR(opt.update(), HasSubstr("setup"));
  DPL_EXPECT_ERROR(opt.zero_grad(), HasSubstr("setup"));
}

}  // namespace
}  // namespace dpl
