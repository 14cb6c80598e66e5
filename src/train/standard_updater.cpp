#include "dpl/train/standard_updater.hpp"

#include <vector>

#include "dpl/core/clock.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/core/error.hpp"
#include "dpl/profile/phase_timer.hpp"

namespace dpl::train {

StandardUpdater::StandardUpdater(data::BatchSource& iterator, data::BatchIterator* batch_iterator,
                                 data::GlobalBatchSource* global_source, optim::Optimizer& optimizer,
                                 parallel::MultiNodeOptimizer* multi_node, LossFunction loss, Device device)
    : iterator_(iterator),
      batch_iterator_(batch_iterator),
      global_source_(global_source),
      optimizer_(optimizer),
      multi_node_(multi_node),
      loss_(std::move(loss)),
      device_(device) {
  DPL_CHECK(static_cast<bool>(loss_), "StandardUpdater: expected a loss function, got an empty one");
}

void StandardUpdater::set_micro_batches(int micro_batches) {
  DPL_CHECK(micro_batches >= 1, "StandardUpdater::set_micro_batches: expected at least 1 batch per update, got ",
            micro_batches);
  DPL_CHECK(micro_batches == 1 || captured_ == nullptr, "StandardUpdater::set_micro_batches: a recorded step ",
            "(graph capture) takes one batch per update, got ", micro_batches, "; turn graph capture off first");
  micro_batches_ = micro_batches;
}

void StandardUpdater::set_graph_capture(bool on, int warmup_steps) {
  captured_.reset();
  recorded_values_.clear();
  if (!on) return;
  DPL_CHECK(micro_batches_ == 1, "StandardUpdater::set_graph_capture: a recorded step takes one batch per update; ",
            "this updater accumulates ", micro_batches_, " (set_micro_batches(1) first)");
  DPL_CHECK(device_.is_cuda(), "StandardUpdater::set_graph_capture: recording the step needs a CUDA device; the ",
            "updater's device is ", device_);
  const std::string why = optimizer_.replay_refusal();
  DPL_CHECK(why.empty(), "StandardUpdater::set_graph_capture: the optimizer cannot run a recorded step: ", why);
  captured_ = std::make_unique<CapturedStep>(
      optimizer_,
      [this](const std::vector<Tensor>& inputs) {
        const data::Batch batch{inputs[0], inputs[1]};
        if (!captured_->capturing()) return loss_(batch, *observation_);
        Observation recorder;
        recorder.record_into(&recorded_values_);
        return loss_(batch, recorder);
      },
      warmup_steps);
}

void StandardUpdater::update(Observation& observation) {
  const double t0 = now_seconds();
  batches_.clear();
  for (int i = 0; i < micro_batches_; ++i) {
    const data::Batch host = iterator_.next();
    batches_.push_back({host.x.to(device_), host.y.to(device_)});
  }
  const data::Batch& batch = batches_.front();
  const double waited = now_seconds() - t0;
  data_seconds_ += waited;
  // Recorded with the optimizer's phases, under the iteration its update will have, so a loop
  // starved by its loader shows in the timeline and in the summary next to compute and allreduce.
  if (multi_node_ != nullptr) multi_node_->timer().record("data", t0, waited, updates_);
  observation.reserve("main/loss");
  Variable loss;
  if (captured_ != nullptr) {
    observation_ = &observation;
    const std::int64_t replays = captured_->replays();
    loss = captured_->update({batch.x, batch.y});
    // The iteration waits for its GPU work below anyway: its verdict costs nothing more, and a
    // non-finite step stops in its own iteration, as an ordinary one does.
    captured_->settle();
    // A replay ran the recorded loss function's kernels: observe what they wrote.
    if (captured_->replays() > replays)
      for (const auto& [key, value] : recorded_values_) observation.observe(key, value);
  } else {
    loss = optimizer_.update([&](int i) { return loss_(batches_[static_cast<std::size_t>(i)], observation); },
                             micro_batches_);
  }
  batches_.clear();  // the source may reuse their buffers for the next update
  observation.observe("main/loss", loss.data());
  // Only under kSkip, so that other runs keep their log's columns; the verdict is known on the
  // host already (the check read its flag), so this costs no wait.
  if (optimizer_.non_finite_policy() == optim::NonFinitePolicy::kSkip) {
    observation.observe("main/skipped_steps", optimizer_.last_step_skipped() ? 1.0 : 0.0);
    if (optimizer_.last_step_skipped()) ++skipped_updates_;
  }
  if (device_.is_cuda()) cuda::synchronize(device_.index);  // the iteration's time includes its GPU work
  const double seconds = now_seconds() - t0;
  update_seconds_ += seconds;
  // The whole iteration beside its phases: what they leave out shows as the difference.
  if (multi_node_ != nullptr) multi_node_->timer().record(profile::kIterationSeries, t0, seconds, updates_);
  ++updates_;
}

}  // namespace dpl::train
