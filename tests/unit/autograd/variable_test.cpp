// The backward engine: gradient accumulation, no-grad scopes, graph lifetime, scalar roots.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <pthread.h>

#include <functional>
#include <memory>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/gradcheck.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;
using test::gradcheck;

using Vars = std::vector<Variable>;

std::vector<float> values(std::initializer_list<float> v) { return std::vector<float>(v); }

TEST(Autograd, LeavesAndResults) {
  Variable x(Tensor::ones({2}), true);
  Variable c(Tensor::ones({2}));
  EXPECT_TRUE(x.is_leaf());
  EXPECT_TRUE(x.requires_grad());
  EXPECT_FALSE(c.requires_grad());
  const Variable y = mul(x, c);
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(y.requires_grad());
  ASSERT_NE(y.creator(), nullptr);
  EXPECT_STREQ(y.creator()->name(), "mul");
  // Only constants in, no graph out.
  const Variable z = mul(c, c);
  EXPECT_TRUE(z.is_leaf());
  EXPECT_FALSE(z.requires_grad());
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, MulOfAVariableWithItselfAccumulates) {
  Variable x(Tensor::from_vector<float>({1, -2, 3}, {3}), true);
  sum(mul(x, x)).backward();
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(2, -4, 6));
}

TEST(Autograd, AddOfAVariableWithItselfAccumulates) {
  Variable x(Tensor::from_vector<float>({1, -2, 3}, {3}), true);
  sum(add(x, x)).backward();
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(2, 2, 2));
  // sub(x, x) is identically zero: the two contributions must cancel, not overwrite.
  Variable y(Tensor::from_vector<float>({1, -2, 3}, {3}), true);
  sum(sub(y, y)).backward();
  EXPECT_THAT(y.grad().to_vector<float>(), ElementsAre(0, 0, 0));
}

TEST(Autograd, VariableUsedByTwoOpsAccumulates) {
  // L = sum(x*x) + sum(relu(x)) + mean(x): dL/dx = 2x + (x > 0) + 1/n.
  Variable x(Tensor::from_vector<float>({1, -2, 3, -0.5f}, {4}), true);
  add(add(sum(mul(x, x)), sum(relu(x))), mean(x)).backward();
  EXPECT_THAT(x.grad().to_vector<float>(),
              Pointwise(FloatNear(1e-6f), values({2 + 1 + 0.25f, -4 + 0 + 0.25f, 6 + 1 + 0.25f, -1 + 0 + 0.25f})));
}

TEST(Autograd, IntermediateUsedTwiceAccumulates) {
  // h = 3x is used twice: L = sum(h*h) + sum(h) so dL/dx = 3 (2h + 1) = 18x + 3.
  Variable x(Tensor::from_vector<float>({1, 2}, {2}), true);
  const Variable three(Tensor::full({}, 3.0));
  const Variable h = mul(x, three);
  add(sum(mul(h, h)), sum(h)).backward();
  EXPECT_THAT(x.grad().to_vector<float>(), Pointwise(FloatNear(1e-5f), values({21, 39})));
}

// A reshape (or squeeze, unsqueeze, an expand that repeats nothing) hands its output gradient to
// its input without a copy when the input is an intermediate seen for the first time. These are
// the cases where that gradient then takes further contributions or feeds two paths.
TEST(Autograd, GradientsPassedThroughReshapesStayApart) {
  // h = 2x reshaped twice and unsqueezed: each view's gradient lands in h's buffer, the first
  // by hand-over, the others added to it.
  Variable x(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}), true);
  const Variable two(Tensor::full({}, 2.0));
  const Variable h = mul(x, two);
  const Variable a = reshape(h, {3, 2});
  const Variable b = reshape(h, {6});
  const Variable u = unsqueeze(h, 0);
  const Variable c1(Tensor::from_vector<float>({1, 0, 1, 0, 1, 0}, {3, 2}));
  const Variable c2(Tensor::from_vector<float>({0, 1, 0, 1, 0, 1}, {6}));
  add(add(sum(mul(a, c1)), sum(mul(b, c2))), sum(mul(u, u))).backward();
  // dL/dh = c1 + c2 + 2h = 1 + 2h, and dL/dx = 2 dL/dh = 2 + 8x.
  EXPECT_THAT(x.grad().to_vector<float>(), Pointwise(FloatNear(1e-5f), values({10, 18, 26, 34, 42, 50})));
}

TEST(Autograd, ChainsOfViewsAgreeWithFiniteDifferences) {
  Generator gen(5);
  const auto f = [](const Vars& v) {
    const Variable h = mul(v[0], v[0]);                              // (2, 3, 4)
    const Variable r = squeeze(unsqueeze(reshape(h, {6, 4}), 1), 1);  // (6, 4), passed through
    const Variable e = expand(reshape(r, {2, 3, 4}), {2, 3, 4});      // repeats nothing
    return add(matmul(e, v[1]), sum(squeeze(reshape(mul(e, e), {2, 3, 4, 1}), -1), {-1}, true));
  };
  EXPECT_TRUE(gradcheck(f, {Tensor::normal({2, 3, 4}, 0, 1, gen), Tensor::normal({4, 1}, 0, 1, gen)}));
}

TEST(Autograd, SharedUseAgreesWithFiniteDifferences) {
  Generator gen(3);
  const auto f = [](const Vars& v) {
    const Variable h = linear(v[0], v[1]);
    return add(mul(h, h), matmul(v[0], v[2]));  // x used by linear and matmul, h used twice
  };
  EXPECT_TRUE(gradcheck(f, {Tensor::normal({3, 4}, 0, 1, gen), Tensor::normal({2, 4}, 0, 1, gen),
                            Tensor::normal({4, 2}, 0, 1, gen)}));
}

TEST(Autograd, RepeatedBackwardOnFreshGraphsAddsToLeafGradients) {
  Variable x(Tensor::from_vector<float>({1, 2}, {2}), true);
  sum(mul(x, x)).backward();
  sum(x).backward();
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(3, 5));
  x.clear_grad();
  EXPECT_FALSE(x.grad().defined());
  sum(x).backward();
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(1, 1));
}

TEST(Autograd, BackwardWritesIntoAGradBufferSetByTheCaller) {
  Variable x(Tensor::from_vector<float>({1, 2}, {2}), true);
  Tensor buffer = Tensor::full({2}, 10.0);
  x.set_grad(buffer);
  sum(mul(x, x)).backward();
  // The caller's buffer is reused (so an arena view stays a view) and accumulated into.
  EXPECT_TRUE(x.grad().shares_storage_with(buffer));
  EXPECT_THAT(buffer.to_vector<float>(), ElementsAre(12, 14));
  DPL_EXPECT_ERROR(x.set_grad(Tensor::zeros({3})), AllOf(HasSubstr("set_grad"), HasSubstr("(2,)"), HasSubstr("(3,)")));
}

TEST(Autograd, ConstantInputsGetNoGradient) {
  Variable x(Tensor::ones({2}), true);
  Variable c(Tensor::full({2}, 2.0));
  sum(mul(x, c)).backward();
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(2, 2));
  EXPECT_FALSE(c.grad().defined());
}

TEST(Autograd, BackwardOfALeafSeedsItsGradient) {
  Variable s(Tensor::full({}, 4.0), true);
  s.backward();
  EXPECT_FLOAT_EQ(s.grad().item(), 1.f);
  Variable c(Tensor::full({}, 4.0));
  DPL_EXPECT_ERROR(c.backward(), AllOf(HasSubstr("backward"), HasSubstr("requires a gradient")));
}

TEST(Autograd, NoGradGuardRecordsNoGraph) {
  Variable x(Tensor::ones({2, 2}), true);
  ASSERT_TRUE(grad_enabled());
  {
    NoGradGuard outer;
    EXPECT_FALSE(grad_enabled());
    const Variable y = relu(mul(x, x));
    EXPECT_EQ(y.creator(), nullptr);
    EXPECT_TRUE(y.is_leaf());
    EXPECT_FALSE(y.requires_grad());
    {
      NoGradGuard inner;
      EXPECT_FALSE(grad_enabled());
    }
    // Leaving the inner scope restores the outer one's mode, not "on".
    EXPECT_FALSE(grad_enabled());
    const Variable loss = sum(linear(x, x));
    EXPECT_EQ(loss.creator(), nullptr);
    DPL_EXPECT_ERROR(loss.backward(), HasSubstr("backward"));
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_NE(mul(x, x).creator(), nullptr);
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, GraphIsFreedAfterBackward) {
  Variable x(Tensor::from_vector<float>({1, 2}, {2}), true);
  const Variable h = mul(x, x);
  const Variable loss = sum(h);
  std::weak_ptr<Node> mul_node = h.creator();
  ASSERT_FALSE(mul_node.expired());
  loss.backward();
  // Every variable on the graph forgot its creator, so the nodes and what they saved are gone.
  EXPECT_EQ(loss.creator(), nullptr);
  EXPECT_EQ(h.creator(), nullptr);
  EXPECT_TRUE(mul_node.expired());
  DPL_EXPECT_ERROR(loss.backward(), AllOf(HasSubstr("backward"), HasSubstr("freed")));
  // The leaf's gradient survives, and a fresh forward pass can run backward again.
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(2, 4));
  sum(mul(x, x)).backward();
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(4, 8));
}

TEST(Autograd, AResultNobodyCanReadIsFreedBeforeBackward) {
  Variable x(Tensor::from_vector<float>({1, 2}, {2}), true);
  std::weak_ptr<Storage> h_storage;
  Variable loss;
  {
    const Variable h = add(x, x);  // add's backward reads no value, so it saves none
    h_storage = h.data().storage();
    loss = sum(add(h, x));
  }
  // Only the graph lists h now and no op saved it: its value is gone before backward runs,
  // and backward still gives every gradient (d/dx of 3x is 3).
  EXPECT_TRUE(h_storage.expired());
  loss.backward();
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(3, 3));
}

// y = x whose backward records the layout of the gradient buffer it is handed for x.
class LayoutProbeNode final : public Node {
 public:
  Strides seen;
  const char* name() const override { return "layout_probe"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    seen = t[0].tensor->strides();
    t[0].tensor->copy_(gy);
  }
};

TEST(Autograd, AFreedValuesGradientKeepsItsMemoryFormat) {
  // A channels-last intermediate whose value is freed before backward: its gradient buffer is
  // still channels-last, as it would be had the value been kept.
  Tensor xt = Tensor::empty_channels_last({2, 3, 4, 5});
  xt.fill_(1.0);
  Variable x(xt, true);
  auto probe = std::make_shared<LayoutProbeNode>();
  std::weak_ptr<Storage> h_storage;
  Strides h_strides;
  Variable loss;
  {
    const Variable h = add(x, x);
    ASSERT_EQ(h.data().memory_format(), MemoryFormat::kChannelsLast);
    h_storage = h.data().storage();
    h_strides = h.data().strides();
    probe->set_inputs({h});
    loss = sum(Variable::make_result(h.data().clone(), probe));
  }
  EXPECT_TRUE(h_storage.expired());
  loss.backward();
  EXPECT_EQ(probe->seen, h_strides);
  EXPECT_THAT(x.grad().to_vector<float>(), ::testing::Each(2.f));
}

// y = x (listed `copies` times among its inputs) whose backward records, per input, whether the
// engine marked its target as completing the input's gradient, and adds gy into it.
class CompletionProbeNode final : public Node {
 public:
  std::vector<bool> completes;
  const char* name() const override { return "completion_probe"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    completes.clear();
    for (GradTarget& target : t) {
      completes.push_back(target.completes);
      if (!target.needed()) continue;
      if (target.beta == 0.f) {
        target.tensor->copy_(gy);
        continue;
      }
      std::vector<float> total = target.tensor->to_vector<float>();
      const std::vector<float> g = gy.to_vector<float>();
      for (std::size_t i = 0; i < total.size(); ++i) total[i] += g[i];
      target.tensor->copy_(Tensor::from_vector(total, gy.shape()));
    }
  }
};

Variable probe_of(const std::vector<Variable>& inputs, const std::shared_ptr<CompletionProbeNode>& node) {
  node->set_inputs(inputs);
  return Variable::make_result(inputs[0].data().clone(), node);
}

TEST(Autograd, TheLastUseOfAResultCompletesItsGradient) {
  // h = 2x feeds three probes; the loss adds their outputs. Backward runs the probes one after
  // another: only the last to run is told that its contribution completes h's gradient, and the
  // gradient is whole (3 contributions of 1, times 2).
  Variable x(Tensor::ones({3}), true);
  const Variable h = mul(x, Variable(Tensor::full({3}, 2.0)));
  std::vector<std::shared_ptr<CompletionProbeNode>> probes;
  Variable loss;
  for (int i = 0; i < 3; ++i) {
    probes.push_back(std::make_shared<CompletionProbeNode>());
    const Variable out = sum(probe_of({h}, probes.back()));
    loss = i == 0 ? out : add(loss, out);
  }
  loss.backward();
  int completing = 0;
  for (const auto& p : probes) {
    ASSERT_EQ(p->completes.size(), 1u);
    completing += p->completes[0] ? 1 : 0;
  }
  EXPECT_EQ(completing, 1);
  EXPECT_THAT(x.grad().to_vector<float>(), ::testing::Each(6.f));
}

TEST(Autograd, NoTargetCompletesALeafOrAResultListedTwiceInOneOp) {
  // A leaf's gradient is not an op's result: never marked. A result listed twice by its only
  // user gets its second contribution after the op ran: neither target is marked.
  Variable x(Tensor::ones({2}), true);
  auto on_leaf = std::make_shared<CompletionProbeNode>();
  sum(probe_of({x}, on_leaf)).backward();
  EXPECT_THAT(on_leaf->completes, ElementsAre(false));
  Variable y(Tensor::ones({2}), true);
  const Variable h = mul(y, Variable(Tensor::full({2}, 3.0)));
  auto twice = std::make_shared<CompletionProbeNode>();
  sum(probe_of({h, h}, twice)).backward();
  EXPECT_THAT(twice->completes, ElementsAre(false, false));
  EXPECT_THAT(y.grad().to_vector<float>(), ::testing::Each(6.f));
}

// y = x whose backward adopts its gradient buffers: it records whether x's target came
// unallocated and what layout it named, then hands gy over (or, with `define` false, nothing).
class AdoptingProbeNode final : public Node {
 public:
  bool define = true, unallocated = false;
  Shape shape;
  MemoryFormat format = MemoryFormat::kContiguous;
  const Storage* output_gradient = nullptr;  // the storage of the gradient this node received
  const char* name() const override { return "adopting_probe"; }
  bool adopts_gradient_buffers() const override { return true; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    output_gradient = gy.storage().get();
    if (!t[0].needed()) return;
    unallocated = t[0].unallocated;
    shape = t[0].shape;
    format = t[0].format;
    if (!define) return;
    if (t[0].unallocated && !t[0].tensor->defined() && t[0].fits(gy)) *t[0].tensor = gy;
    else t[0].tensor->copy_(gy);
  }
};

TEST(Autograd, ANodeThatAdoptsItsBuffersGetsIntermediatesUnallocatedAndLeavesAllocated) {
  Variable x(Tensor::from_vector<float>({1, 2, 3}, {3}), true);
  // An intermediate input: no buffer yet, its layout named; the node's tensor becomes the buffer.
  auto on_intermediate = std::make_shared<AdoptingProbeNode>();
  const Variable h = add(x, x);
  on_intermediate->set_inputs({h});
  sum(Variable::make_result(h.data().clone(), on_intermediate)).backward();
  EXPECT_TRUE(on_intermediate->unallocated);
  EXPECT_EQ(on_intermediate->shape, (Shape{3}));
  EXPECT_EQ(on_intermediate->format, MemoryFormat::kContiguous);
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(2, 2, 2));
  // A leaf input: its gradient buffer is allocated as for any node.
  x.clear_grad();
  auto on_leaf = std::make_shared<AdoptingProbeNode>();
  on_leaf->set_inputs({x});
  sum(Variable::make_result(x.data().clone(), on_leaf)).backward();
  EXPECT_FALSE(on_leaf->unallocated);
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(1, 1, 1));
}

TEST(Autograd, ANodeThatLeavesAnAdoptedBufferUndefinedIsNamed) {
  Variable x(Tensor::from_vector<float>({1, 2}, {2}), true);
  auto probe = std::make_shared<AdoptingProbeNode>();
  probe->define = false;
  const Variable h = add(x, x);
  probe->set_inputs({h});
  const Variable loss = sum(Variable::make_result(h.data().clone(), probe));
  DPL_EXPECT_ERROR(loss.backward(), AllOf(HasSubstr("adopting_probe"), HasSubstr("to be defined by the op")));
}

TEST(Autograd, AddHandsItsGradientToBothOperandsWithoutACopy) {
  Variable x(Tensor::from_vector<float>({1, 2, 3}, {3}), true), z(Tensor::from_vector<float>({4, 5, 6}, {3}), true);
  auto left = std::make_shared<AdoptingProbeNode>(), right = std::make_shared<AdoptingProbeNode>();
  left->set_inputs({x});
  right->set_inputs({z});
  const Variable s = add(Variable::make_result(x.data().clone(), left), Variable::make_result(z.data().clone(), right));
  sum(mul(s, Variable(Tensor::from_vector<float>({1, 10, 100}, {3})))).backward();
  ASSERT_NE(left->output_gradient, nullptr);
  EXPECT_EQ(left->output_gradient, right->output_gradient);
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(1, 10, 100));
  EXPECT_THAT(z.grad().to_vector<float>(), ElementsAre(1, 10, 100));
}

// y = h that hands gy to h as its gradient buffer and keeps a handle to gy outside the graph,
// as a second operand of an add would.
class SharingProbeNode final : public Node {
 public:
  std::shared_ptr<Tensor> kept;
  const char* name() const override { return "sharing_probe"; }
  bool adopts_gradient_buffers() const override { return true; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    *kept = gy;
    ASSERT_TRUE(t[0].unallocated);
    *t[0].tensor = gy;
  }
};

TEST(Autograd, AGradientBufferSharedWithAnotherHolderIsCopiedBeforeAnythingAddsIntoIt) {
  Variable x(Tensor::from_vector<float>({1, 2, 3}, {3}), true);
  const Variable h = mul(x, Variable(Tensor::full({3}, 2.f)));  // h = 2x
  auto probe = std::make_shared<SharingProbeNode>();
  probe->kept = std::make_shared<Tensor>();
  probe->set_inputs({h});
  const Variable y = Variable::make_result(h.data().clone(), probe);
  // The probe runs first and shares its gradient (ones) with h; then h*h adds 2h = 4x into h's
  // buffer, which must not reach the tensor the probe still holds.
  add(sum(mul(h, h)), sum(y)).backward();
  EXPECT_THAT(probe->kept->to_vector<float>(), ElementsAre(1, 1, 1));
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(2 * (1 + 4), 2 * (1 + 8), 2 * (1 + 12)));
}

TEST(Autograd, ValuesThatBackwardReadsOrAHandleHoldsSurvive) {
  Variable x(Tensor::from_vector<float>({1, 2}, {2}), true);
  std::weak_ptr<Storage> saved_storage;
  Variable loss;
  {
    const Variable h = mul(x, x);  // mul saves both factors for its backward
    saved_storage = h.data().storage();
    loss = sum(mul(h, h));
  }
  EXPECT_FALSE(saved_storage.expired());
  // A handle the user keeps keeps its value readable, before and after backward.
  Variable kept = add(x, x);
  Variable replaced = add(kept, x);
  replaced = add(replaced, x);  // the first value of `replaced` is unreachable now
  const Variable loss2 = sum(replaced);
  EXPECT_THAT(kept.data().to_vector<float>(), ElementsAre(2, 4));
  loss.backward();
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(4, 32));  // d/dx x^4
  x.clear_grad();
  loss2.backward();
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(4, 4));
  EXPECT_THAT(kept.data().to_vector<float>(), ElementsAre(2, 4));
}

TEST(Autograd, BackwardThroughAPartlyFreedGraphThrows) {
  // z1 and z2 share h; z1's backward frees h's graph, so z2 can no longer reach x through h.
  Variable x(Tensor::from_vector<float>({1, 2}, {2}), true);
  const Variable h = mul(x, x);
  const Variable z1 = sum(h);
  const Variable z2 = sum(relu(h));
  z1.backward();
  DPL_EXPECT_ERROR(z2.backward(), AllOf(HasSubstr("backward"), HasSubstr("relu"), HasSubstr("freed")));
  // The refused call touched nothing: x holds z1's gradient alone, and z2's graph is intact.
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(2, 4));
  EXPECT_NE(z2.creator(), nullptr);
}

TEST(Autograd, BackwardOnANonScalarThrows) {
  Variable x(Tensor::ones({2, 3}), true);
  const Variable y = mul(x, x);
  DPL_EXPECT_ERROR(y.backward(), AllOf(HasSubstr("backward"), HasSubstr("one element"), HasSubstr("(2, 3)")));
  // The failed call left the graph intact.
  sum(y).backward();
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(2, 2, 2, 2, 2, 2));
}

TEST(Autograd, OneElementRootOfAnyShapeIsAccepted) {
  Variable x(Tensor::from_vector<float>({3}, {1, 1}), true);
  const Variable y = mul(x, x);  // shape (1, 1)
  y.backward();
  EXPECT_FLOAT_EQ(x.grad().at<float>({0, 0}), 6.f);
}

// Runs fn on a thread with a 512 KiB stack, so that anything that recurses once per graph node
// fails on a chain of a few thousand nodes instead of only on chains of hundreds of thousands.
void run_on_small_stack(const std::function<void()>& fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 512 * 1024), 0);
  pthread_t thread;
  auto trampoline = [](void* arg) -> void* {
    (*static_cast<const std::function<void()>*>(arg))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, trampoline, const_cast<std::function<void()>*>(&fn)), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

constexpr int kDeep = 20000;

TEST(Autograd, BackwardThroughADeepChainDoesNotRecurse) {
  float grad = 0.f, value = 0.f;
  run_on_small_stack([&] {
    Variable x(Tensor::full({}, 1.0), true);
    const Variable one(Tensor::full({}, 1.0));
    Variable h = x;
    for (int i = 0; i < kDeep; ++i) h = add(h, one);
    h.backward();
    grad = x.grad().item();
    value = h.item();
  });
  EXPECT_FLOAT_EQ(grad, 1.f);
  EXPECT_FLOAT_EQ(value, kDeep + 1.f);
}

TEST(Autograd, DroppingADeepGraphWithoutBackwardDoesNotRecurse) {
  std::weak_ptr<Node> first;
  bool built = false;
  run_on_small_stack([&] {
    Variable x(Tensor::full({}, 1.0), true);
    const Variable one(Tensor::full({}, 1.0));
    Variable h = add(x, one);
    first = h.creator();
    for (int i = 1; i < kDeep; ++i) h = add(h, one);
    built = true;
  });  // the last handle to the whole chain goes away here
  EXPECT_TRUE(built);
  EXPECT_TRUE(first.expired());
}

TEST(Autograd, DroppingADeepGraphOfRepeatedInputsDoesNotRecurse) {
  std::weak_ptr<Node> first;
  run_on_small_stack([&] {
    Variable x(Tensor::ones({2}), true);
    Variable h = mul(x, x);
    first = h.creator();
    for (int i = 1; i < kDeep; ++i) h = mul(h, h);  // each node lists its input twice
  });
  EXPECT_TRUE(first.expired());
}

TEST(Autograd, DroppingTheRootKeepsWhatTheUserStillHolds) {
  Variable x(Tensor::from_vector<float>({1, 2}, {2}), true);
  Variable kept = mul(x, x);
  {
    const Variable root = sum(relu(kept));
    ASSERT_NE(root.creator(), nullptr);
  }
  // The intermediate the user holds keeps its own graph and can still run backward.
  ASSERT_NE(kept.creator(), nullptr);
  sum(kept).backward();
  EXPECT_THAT(x.grad().to_vector<float>(), ElementsAre(2, 4));
}

TEST(Autograd, SetRequiresGradOnAResultIsRejected) {
  Variable x(Tensor::ones({2}), true);
  Variable y = mul(x, x);
  DPL_EXPECT_ERROR(y.set_requires_grad(false), HasSubstr("set_requires_grad"));
  Variable leaf(Tensor::ones({2}));
  leaf.set_requires_grad(true);
  sum(leaf).backward();
  EXPECT_THAT(leaf.grad().to_vector<float>(), ElementsAre(1, 1));
}

}  // namespace
}  // namespace dpl
