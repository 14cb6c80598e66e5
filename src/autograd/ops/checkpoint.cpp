// Activation checkpointing: the node keeps the inputs' values and the function, and its backward
// runs the function again with recording on and back-propagates through that recording.
#include "dpl/autograd/ops/checkpoint.hpp"

#include <memory>
#include <string>
#include <utility>

#include "autograd/ops/support.hpp"

namespace dpl {

namespace {

thread_local int t_recomputing = 0;

// The generators as fn first saw them, set back for the recomputation and returned afterwards
// to where training has taken them since.
class ReplayedGenerators {
 public:
  ReplayedGenerators() = default;
  explicit ReplayedGenerators(const std::vector<Generator*>& gens) {
    for (Generator* g : gens)
      if (g != nullptr) saved_.emplace_back(g, *g);
  }
  // Swaps each generator's state with the saved one: once before the recomputation, once after.
  void swap() {
    for (auto& [g, state] : saved_) std::swap(*g, state);
  }

 private:
  std::vector<std::pair<Generator*, Generator>> saved_;
};

// For one recomputation: the generators replayed, gradient recording on and recomputing() true,
// whatever the caller's modes; all restored after, also when the function throws.
class RecomputeScope {
 public:
  explicit RecomputeScope(ReplayedGenerators& generators) : generators_(generators) {
    generators_.swap();
    ++t_recomputing;
  }
  ~RecomputeScope() {
    --t_recomputing;
    generators_.swap();
  }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  ReplayedGenerators& generators_;
  EnableGradGuard recording_;
};

class CheckpointNode final : public Node {
 public:
  CheckpointFunction fn;
  std::vector<Tensor> values;      // the inputs' values, in order
  std::vector<bool> needs_grad;  // whether each input required a gradient
  Shape out_shape;
  TensorOptions out_options;
  ReplayedGenerators generators;

  const char* name() const override { return "checkpoint"; }

  void backward(const Tensor& gy, std::vector<GradTarget>& targets) override {
    std::vector<Variable> leaves;
    leaves.reserve(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) leaves.emplace_back(values[i], needs_grad[i]);
    Variable y;
    {
      RecomputeScope scope(generators);
      y = fn(leaves);
    }
    DPL_CHECK(y.defined() && y.shape() == out_shape && y.dtype() == out_options.dtype &&
                  y.device() == out_options.device,
              "checkpoint: the function computed again in backward gave ",
              y.defined() ? "shape " + shape_str(y.shape()) + ", " + dtype_name(y.dtype()) + " on " + y.device().str()
                          : std::string("an undefined variable"),
              ", but shape ", shape_str(out_shape), ", ", dtype_name(out_options.dtype), " on ",
              out_options.device.str(), " the first time; it must compute the same from the same inputs");
    if (y.requires_grad()) y.backward(gy);
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      GradTarget& t = targets[i];  // inputs() lists every input, in order
      if (!t.needed()) continue;
      const Tensor& g = leaves[i].grad();
      if (g.defined()) ops_detail::pass_into(g, t);
      else if (t.beta == 0.f) t.tensor->fill_(0.0);  // the result does not depend on this input
    }
  }
  void release() override {
    fn = nullptr;
    values.clear();
    generators = ReplayedGenerators();
  }
};

}  // namespace

bool recomputing() { return t_recomputing > 0; }

Variable checkpoint(const CheckpointFunction& fn, const std::vector<Variable>& inputs,
                    const std::vector<Generator*>& replay) {
  DPL_CHECK(static_cast<bool>(fn), "checkpoint: expected a callable function, got an empty one");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    DPL_CHECK(inputs[i].defined(), "checkpoint: expected defined inputs, got an undefined one at position ", i);
  if (!grad_enabled()) return fn(inputs);
  // The generators' states before fn draws anything, for the recomputation.
  ReplayedGenerators generators(replay);
  // fn runs recording, so that the result knows whether anything it read requires a gradient;
  // the recording is dropped with y below, before the rest of the forward pass.
  std::vector<Variable> leaves;
  leaves.reserve(inputs.size());
  for (const Variable& in : inputs) leaves.emplace_back(in.data(), in.requires_grad());
  Variable y = fn(leaves);
  DPL_CHECK(y.defined(), "checkpoint: the function returned an undefined variable");
  if (!y.requires_grad()) return y;
  auto node = std::make_shared<CheckpointNode>();
  node->fn = fn;
  node->out_shape = y.shape();
  node->out_options = TensorOptions(y.dtype(), y.device());
  node->generators = std::move(generators);
  for (const Variable& in : inputs) {
    node->values.push_back(in.data());
    node->needs_grad.push_back(in.requires_grad());
  }
  node->set_inputs(inputs);
  const Tensor out = y.data();
  y = Variable();  // frees fn's recording: only the inputs' values are kept
  return Variable::make_result(out, node);
}

Variable checkpoint(const std::function<Variable(const Variable&)>& fn, const Variable& input,
                    const std::vector<Generator*>& replay) {
  DPL_CHECK(static_cast<bool>(fn), "checkpoint: expected a callable function, got an empty one");
  return checkpoint([fn](const std::vector<Variable>& in) { return fn(in[0]); }, {input}, replay);
}

}  // namespace dpl
