#pragma once
// A training step recorded once as a CUDA graph and replayed: forward, backward and the
// optimizer's update in one launch per step (docs/cuda-graphs.md).

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dpl/autograd/variable.hpp"
#include "dpl/optim/optimizer.hpp"

namespace dpl::train {

/// Runs optimizer.update(loss_fn) steps on a GPU, recording one step as a CUDA graph after a few
/// ordinary ones and replaying the recording from then on, which removes the host's cost of
/// launching every kernel of every step.
///
/// The loss function builds the loss from the step's inputs, tensors on the model's device. It
/// runs in the warm-up steps, once more while the step is recorded, and for any step whose
/// inputs differ in shape, dtype or memory format from the recorded ones (such a step runs
/// unrecorded: a last, shorter batch). Replayed steps copy their inputs into the recorded step's
/// input buffers and run the recorded kernels, so the loss function must compute everything
/// from its inputs and the model: a value it reads back to the host, or takes from the host,
/// would be frozen at the recording (reading back fails the recording with a dpl::Error).
///
/// The optimizer runs in replay mode (optim::Optimizer::set_replay_mode): per step the host
/// copies the step's values (learning rate, Adam's bias correction) to the device before the
/// replay and reads the non-finite flag after it (when the policy checks), so schedules,
/// skipping and stopping behave as in ordinary steps, and results are bit-identical to them.
///
/// Under NonFinitePolicy::kStop, where the optimizer can (Optimizer::can_defer_verdict(): not
/// under a wrapper), the flag of a step is read during the next update() instead, so that the
/// host never waits for the device between steps: a non-finite step still changes nothing, nor
/// does any step after it, but its error comes from the next update() or from settle(), not
/// from its own update(). Call settle() after the last step (the destructor reports an unsettled
/// non-finite step on stderr, as it cannot throw). A step whose optimizer's non-finite policy
/// changed since the recording is recorded again.
/// Requires an optimizer that can run so (replay_refusal() empty: SGD, MomentumSGD, Adam, under
/// MixedPrecision in any dtype (float16's loss scale included), under a one-process
/// parallel::MultiNodeOptimizer, no gradient hooks), set up on a model on a GPU, and the caching
/// allocator.
class CapturedStep {
 public:
  /// The loss of one step from its inputs (on the model's device).
  using LossFunction = std::function<Variable(const std::vector<Tensor>& inputs)>;

  /// Requires a callable loss and warmup_steps >= 1 (dpl::Error otherwise). The optimizer must
  /// outlive this object; it is checked at the first update.
  CapturedStep(optim::Optimizer& optimizer, LossFunction loss, int warmup_steps = 3);
  /// Takes the optimizer out of replay mode.
  ~CapturedStep();
  CapturedStep(const CapturedStep&) = delete;
  CapturedStep& operator=(const CapturedStep&) = delete;

  /// One training step on inputs (on the host or on the model's device); returns the loss, a
  /// tensor of its own (a later step does not change it). The first warmup_steps run ordinarily
  /// (they lay out the optimizer's state and let the convolutions choose their algorithms), the
  /// next records and replays. Throws the optimizer's dpl::Error (a non-finite step under kStop),
  /// and dpl::Error when the step cannot be recorded (a CPU model, an optimizer that refuses
  /// replay mode, a loss function that reads a value back), saying why.
  Variable update(const std::vector<Tensor>& inputs);

  /// Reads the verdict on the last replayed step if it is still pending (waiting for that step)
  /// and throws the optimizer's dpl::Error when the step was not finite; nothing otherwise.
  void settle();

  /// Whether the step has been recorded.
  bool captured() const;
  /// True while the loss function runs for the recording (it then builds the recorded step).
  bool capturing() const { return capturing_; }
  /// Steps replayed from the recording, and steps run unrecorded (warm-up and odd inputs).
  std::int64_t replays() const { return replays_; }
  std::int64_t unrecorded_steps() const { return unrecorded_; }

 private:
  Variable run_unrecorded(const std::vector<Tensor>& inputs);
  void record(const std::vector<Tensor>& inputs);
  bool matches_recording(const std::vector<Tensor>& inputs) const;

  struct Recording;
  optim::Optimizer& optimizer_;
  LossFunction loss_;
  int warmup_steps_;
  std::unique_ptr<Recording> recording_;
  bool capturing_ = false;
  std::int64_t replays_ = 0;
  std::int64_t unrecorded_ = 0;
};

}  // namespace dpl::train
