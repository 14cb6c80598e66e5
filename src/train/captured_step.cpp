#include "dpl/train/captured_step.hpp"

#include <cstdio>
#include <exception>
#include <string>
#include <utility>

#include "dpl/core/cuda.hpp"
#include "dpl/core/error.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::train {

// The recorded step: its graph, the input buffers it reads, the loss it writes, and the
// non-finite policy it was recorded under (which decides whether it checks the gradients and
// whether it lowers the flag).
struct CapturedStep::Recording {
  cuda::Graph graph;
  std::vector<Tensor> inputs;
  Tensor loss;
  optim::NonFinitePolicy policy = optim::NonFinitePolicy::kStop;
};

CapturedStep::CapturedStep(optim::Optimizer& optimizer, LossFunction loss, int warmup_steps)
    : optimizer_(optimizer), loss_(std::move(loss)), warmup_steps_(warmup_steps) {
  DPL_CHECK(static_cast<bool>(loss_), "CapturedStep: expected a loss function, got an empty one");
  DPL_CHECK(warmup_steps >= 1, "CapturedStep: expected warmup_steps >= 1 (the state and the convolution ",
            "algorithms are settled by ordinary steps first), got ", warmup_steps);
}

CapturedStep::~CapturedStep() {
  try {
    settle();
  } catch (const std::exception& e) {
    // A destructor cannot throw: the verdict must still not go unsaid.
    std::fprintf(stderr, "CapturedStep: the last recorded step was not settled: %s\n", e.what());
  }
  if (recording_ != nullptr && optimizer_.replay_mode()) optimizer_.set_replay_mode(false);
}

void CapturedStep::settle() { optimizer_.settle_replay(); }

bool CapturedStep::captured() const { return recording_ != nullptr; }

namespace {
std::vector<Tensor> on_device(const std::vector<Tensor>& inputs, Device device) {
  std::vector<Tensor> out;
  out.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    DPL_CHECK(t.defined(), "CapturedStep::update: expected defined input tensors, got an undefined one");
    out.push_back(t.to(device));
  }
  return out;
}
}  // namespace

Variable CapturedStep::run_unrecorded(const std::vector<Tensor>& inputs) {
  const std::vector<Tensor> moved = on_device(inputs, optimizer_.target().device());
  const bool replaying = optimizer_.replay_mode();
  if (replaying) optimizer_.set_replay_mode(false);
  Variable loss = optimizer_.update([&] { return loss_(moved); });
  if (replaying) optimizer_.set_replay_mode(true);
  ++unrecorded_;
  return loss;
}

bool CapturedStep::matches_recording(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != recording_->inputs.size()) return false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& a = inputs[i];
    const Tensor& b = recording_->inputs[i];
    if (!a.defined() || a.shape() != b.shape() || a.dtype() != b.dtype() ||
        a.is_channels_last() != b.is_channels_last())
      return false;
  }
  return true;
}

void CapturedStep::record(const std::vector<Tensor>& inputs) {
  const Device device = optimizer_.target().device();
  DPL_CHECK(device.is_cuda(), "CapturedStep: recording a step needs a model on a GPU; this one is on ", device);
  const std::string why = optimizer_.replay_refusal();
  DPL_CHECK(why.empty(), "CapturedStep: this optimizer cannot run a recorded step: ", why);
  auto recording = std::make_unique<Recording>();
  for (const Tensor& t : on_device(inputs, device)) {
    Tensor buffer = Tensor::empty_like(t);
    buffer.copy_(t);
    recording->inputs.push_back(buffer);
  }
  // The warm-up steps left their activations in the shared cache; the recording takes fresh
  // memory of its own, so give those back first rather than hold both.
  cuda::synchronize(device.index);
  cuda::empty_cache(device.index);
  optimizer_.set_replay_mode(true);
  capturing_ = true;
  try {
    recording->graph.capture(device.index, [&] {
      recording->loss = optimizer_.update([&] { return loss_(recording->inputs); }).data();
    });
  } catch (...) {
    capturing_ = false;
    optimizer_.set_replay_mode(false);
    throw;
  }
  capturing_ = false;
  recording->policy = optimizer_.non_finite_policy();
  recording_ = std::move(recording);
}

Variable CapturedStep::update(const std::vector<Tensor>& inputs) {
  if (recording_ == nullptr) {
    if (unrecorded_ < warmup_steps_) return run_unrecorded(inputs);
    record(inputs);
  } else if (!matches_recording(inputs)) {
    return run_unrecorded(inputs);
  } else if (optimizer_.non_finite_policy() != recording_->policy) {
    // The recording checks, or keeps the flag raised, as the old policy said: record anew
    // (set_replay_mode, in record(), settles the last verdict first).
    recording_.reset();
    record(inputs);
  } else {
    for (std::size_t i = 0; i < inputs.size(); ++i) recording_->inputs[i].copy_(inputs[i]);
  }
  optimizer_.prepare_replay();
  recording_->graph.replay();
  // The loss of this step, before a later replay writes the next one over it.
  Tensor loss = recording_->loss.clone();
  if (optimizer_.can_defer_verdict()) optimizer_.finish_replay_deferred(loss);
  else optimizer_.finish_replay();
  ++replays_;
  return Variable(loss);
}

}  // namespace dpl::train
