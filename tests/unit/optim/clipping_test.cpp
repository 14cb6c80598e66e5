// Gradient clipping by global norm and gradient hooks on a plain optimizer (one process).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"

namespace {
using namespace dpl;
using ::testing::HasSubstr;

// A Linear(2 -> 1) with bias, weights [1, 2] and bias 0.5, whose gradients are set by hand.
struct Tiny {
  nn::Linear layer{2, 1, true};
  optim::SGD opt{1.0f};
  Tiny() {
    Tensor w = layer.named_parameters()[0].second.data(), b = layer.named_parameters()[1].second.data();
    w.copy_(Tensor::from_vector<float>({1.f, 2.f}, {1, 2}));
    b.fill_(0.5);
    opt.setup(layer);
  }
  void set_grads(float w0, float w1, float b) {
    Tensor all = layer.arena().grads();
    all.fill_(0.0);
    Tensor gw = layer.named_parameters()[0].second.grad();
    gw.copy_(Tensor::from_vector<float>({w0, w1}, {1, 2}));
    Tensor gb = layer.named_parameters()[1].second.grad();
    gb.fill_(b);
  }
  std::vector<float> weight() const { return layer.named_parameters()[0].second.data().to_vector<float>(); }
  float bias() const { return layer.named_parameters()[1].second.data().to_vector<float>()[0]; }
};

TEST(GradientClipping, ScalesAllGradientsByMaxNormOverTheGlobalNorm) {
  Tiny t;
  const auto clipping = optim::clip_gradients(t.opt, 1.0);
  t.set_grads(3.f, 0.f, 4.f);  // global norm 5 across two parameters
  EXPECT_DOUBLE_EQ(optim::gradient_norm(t.layer.arena()), 5.0);
  t.opt.update();
  EXPECT_DOUBLE_EQ(clipping->last_norm(), 5.0);
  // SGD with lr 1 subtracts the clipped gradient: (3, 0, 4) / 5.
  EXPECT_FLOAT_EQ(t.weight()[0], 1.f - 0.6f);
  EXPECT_FLOAT_EQ(t.weight()[1], 2.f);
  EXPECT_FLOAT_EQ(t.bias(), 0.5f - 0.8f);
}

TEST(GradientClipping, LeavesGradientsWithinTheNormAlone) {
  Tiny t;
  const auto clipping = optim::clip_gradients(t.opt, 10.0);
  t.set_grads(0.25f, 0.5f, 0.f);
  t.opt.update();
  EXPECT_DOUBLE_EQ(clipping->last_norm(), std::sqrt(0.3125));
  EXPECT_FLOAT_EQ(t.weight()[0], 0.75f);
  EXPECT_FLOAT_EQ(t.weight()[1], 1.5f);
}

TEST(GradientClipping, RefusesABadThreshold) {
  Tiny t;
  DPL_EXPECT_ERROR(optim::clip_gradients(t.opt, 0.0), HasSubstr("expected a finite max_norm > 0, got 0"));
  DPL_EXPECT_ERROR(optim::GradientClipping(-1.0), HasSubstr("got -1"));
  DPL_EXPECT_ERROR(t.opt.add_gradient_hook(optim::GradientHook()), HasSubstr("expected a callable hook"));
}

TEST(GradientHooks, RunOncePerUpdateInOrderBeforeTheStep) {
  Tiny t;
  std::vector<std::string> calls;
  t.opt.add_gradient_hook([&](nn::ParameterArena& arena) {
    calls.push_back("double");
    Tensor g = arena.grads();
    g.copy_(mul(Variable(g), Variable(Tensor::full({}, 2.0))).data());
  });
  const auto clipping = optim::clip_gradients(t.opt, 1.0);  // sees the doubled gradients
  t.opt.add_gradient_hook([&](nn::ParameterArena&) { calls.push_back("after"); });
  t.set_grads(0.3f, 0.f, 0.4f);
  t.opt.update();
  EXPECT_EQ(calls, (std::vector<std::string>{"double", "after"}));
  EXPECT_DOUBLE_EQ(std::round(clipping->last_norm() * 1e6) / 1e6, 1.0);
  EXPECT_EQ(t.opt.gradient_hook_count(), 3u);
  EXPECT_EQ(t.opt.t(), 1);
}

}  // namespace
