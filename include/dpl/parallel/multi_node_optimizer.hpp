#pragma once
// MultiNodeOptimizer: turns any optimizer into a data-parallel one.

#include <memory>

#include "dpl/comm/communicator.hpp"
#include "dpl/optim/optimizer.hpp"
#include "dpl/parallel/gradient_reducer.hpp"
#include "dpl/profile/phase_timer.hpp"

namespace dpl::parallel {

/// Decorates an optimizer for data-parallel training over a communicator, as ChainerMN's
/// create_multi_node_optimizer does.
///
/// The communication is a GradientReducer's: setup(model) checks — on every rank, before any
/// collective touches the parameters — that all ranks have the same parameter names, shapes and
/// dtypes (a mismatch throws the same dpl::Error on every rank, naming the ranks that differ and
/// their first differing parameter), then broadcasts rank 0's weights. Each update then runs
///   compute (update(loss_fn) only: forward + backward, with the sub-phases compute/forward and
///     compute/backward)
///   → prepare (the wrapped optimizer's prepare_gradients(): a 16-bit model's float32 master
///     gradients and the non-finite check; with overlap these run bucket by bucket in backward)
///   → allreduce (mean over all ranks of what the wrapped optimizer's prepare_gradients() gives:
///     the gradient arena, one call, in the communicator's CommOptions::allreduce_dtype; under
///     optim::MixedPrecision its float32 master gradients, and with float16 its overflow flag, so
///     that every rank skips the same steps)
///   → optimize (the wrapped optimizer's gradient hooks, such as clipping, then its fused update),
/// timing each phase (and the allreduce's sub-phases) into timer().
///
/// Non-finite gradients (see optim::NonFinitePolicy and docs/reliability.md): unless the policy
/// is kOff, each rank's prepare_gradients() raises a one-element flag when its own gradients hold
/// an Inf or NaN, in the pass it makes anyway (or one read-only pass for float32); the flag is
/// averaged with the gradients, so every rank reads the same verdict (one four-byte read per
/// step). kStop: every rank throws the same dpl::Error naming the iteration, the rank(s) whose
/// gradients were not finite, the first such parameter and the ranks whose loss was not finite
/// (one allgather of two floats per rank, on the failure path only). kSkip: every rank skips
/// the step. float16 overflow under MixedPrecision always skips (loss scaling).
///
/// If the parameter set changes (a parameter added, data replaced), the check and the broadcast
/// run again before the update.
/// The gradient of the first iteration is used like every other.
class MultiNodeOptimizer : public optim::Optimizer {
 public:
  MultiNodeOptimizer(std::unique_ptr<optim::Optimizer> actual, std::shared_ptr<comm::Communicator> comm,
                     profile::TimingMode mode = profile::TimingMode::kNonIntrusive);

  void setup(nn::Module& model) override;
  void update() override;
  Variable update(const std::function<Variable()>& loss_fn) override;
  void zero_grad() override;
  /// The wrapped optimizer's backward (MixedPrecision scales a float16 loss).
  void backward(const Variable& loss) override { actual_->backward(loss); }

  float lr() const override { return actual_->lr(); }
  void set_lr(float lr) override { actual_->set_lr(lr); }
  float weight_decay() const override { return actual_->weight_decay(); }
  void set_weight_decay(float rate) override { actual_->set_weight_decay(rate); }
  std::int64_t t() const override { return actual_->t(); }
  /// The policy is the wrapped optimizer's (set through it).
  void set_non_finite_policy(optim::NonFinitePolicy policy) override { actual_->set_non_finite_policy(policy); }
  optim::NonFinitePolicy non_finite_policy() const override { return actual_->non_finite_policy(); }
  bool stops_on_non_finite() const override { return actual_->stops_on_non_finite(); }
  bool gradients_finite() override { return actual_->gradients_finite(); }
  std::int64_t iteration() const override { return actual_->iteration(); }
  std::int64_t skipped_steps() const override { return actual_->skipped_steps(); }
  bool last_step_skipped() const override { return actual_->last_step_skipped(); }
  std::vector<std::pair<std::string, Tensor>> state() const override { return actual_->state(); }
  std::map<std::string, double> state_scalars() const override { return actual_->state_scalars(); }
  /// Restores the wrapped optimizer's state; local to this rank (no communication), so every
  /// rank loads the same state itself.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const std::map<std::string, double>& scalars) override {
    actual_->load_state(tensors, scalars);
  }
  nn::Module& target() const override { return actual_->target(); }
  /// Adds the hook to the wrapped optimizer, whose update runs it inside the optimize phase: after
  /// the allreduce, on the averaged gradients, which are the same on every rank (so a norm it
  /// computes agrees across ranks without communication).
  void add_gradient_hook(optim::GradientHook hook) override { actual_->add_gradient_hook(std::move(hook)); }
  std::size_t gradient_hook_count() const override { return actual_->gradient_hook_count(); }

  /// Replay mode (optim::Optimizer::set_replay_mode, for train::CapturedStep): one process only
  /// for now (the communicators time their phases on the host and the MPI ones call MPI from
  /// the host, neither of which a recording can hold), without overlap; then the wrapped
  /// optimizer decides. Under replay the timer records one phase per step, "step" (forward,
  /// backward and optimize together: a recording cannot be split), from prepare_replay() to
  /// finish_replay().
  std::string replay_refusal() const override;
  void set_replay_mode(bool on, const Tensor& skip_flag = Tensor()) override;
  void prepare_replay() override;
  void finish_replay() override;
  void count_replayed_step(bool taken) override { actual_->count_replayed_step(taken); }
  /// False: this wrapper reads the verdict itself, in finish_replay().
  bool can_defer_verdict() const override { return false; }

  /// Overlap of the allreduce with backward (OverlapOptions; off by default). With it on,
  /// update(loss_fn) arms the reducer before backward, so each bucket of gradients is averaged on
  /// a worker thread as soon as backward has finished it; the "allreduce" phase is then the
  /// exposed part (what the step waited for after backward), and the phases "allreduce/hidden"
  /// (bucket time that ran during backward), "allreduce/total" and "allreduce/bucket<k>" say the
  /// rest. update() after a hand-driven backward reduces after backward as before. Results are
  /// bit-identical to the same buckets reduced after backward. On a GPU the buckets run on a side
  /// stream (GradientReducer::begin_backward). Requires a float32 model, or a wrapped optimizer
  /// that prepares float32 gradient ranges (optim::MixedPrecision), and MPI initialised for
  /// calls from a second thread (checked at setup(), or here when already set up; dpl::Error
  /// otherwise).
  void set_overlap(const OverlapOptions& options);
  const OverlapOptions& overlap() const { return overlap_; }

  /// The wrapped optimizer.
  optim::Optimizer& actual() const { return *actual_; }
  comm::Communicator& communicator() const { return *comm_; }
  /// This rank's phase times.
  profile::PhaseTimer& timer() { return timer_; }
  const profile::PhaseTimer& timer() const { return timer_; }
  /// The timing mode chosen at construction (may be changed between updates).
  profile::TimingMode timing_mode() const { return mode_; }
  void set_timing_mode(profile::TimingMode mode);
  /// Summary of the phase times across all ranks (collective; see profile::summarize).
  profile::Summary summary(std::int64_t skip_warmup = 1) const;

 protected:
  void step(nn::ParameterArena&) override {}

 private:
  void broadcast_parameters();
  void allreduce_and_step(bool overlapped);
  std::vector<Tensor> prepare_gradients_timed();
  void step();
  Tensor& local_flag_on(Device device);
  void record_overlap(const OverlapTimes& times);
  void sync_point();
  // The failure path of kStop: collective, reached by every rank alike (the averaged flag is the
  // same everywhere); throws the message naming the ranks.
  [[noreturn]] void stop_on_every_rank(const Tensor& averaged_grads);

  std::unique_ptr<optim::Optimizer> actual_;
  std::shared_ptr<comm::Communicator> comm_;
  profile::TimingMode mode_;
  profile::PhaseTimer timer_;
  std::unique_ptr<GradientReducer> reducer_;  // over target(), from setup()
  std::int64_t iteration_ = 0;
  double replay_start_ = 0.0;           // when prepare_replay() began, for the "step" phase
  std::vector<Tensor> replay_buffers_;  // what the recorded step's prepare_gradients() gave
  Tensor local_flag_;  // this rank's own non-finite flag, kept from before the allreduce averages it
  OverlapOptions overlap_;
};

/// ChainerMN's spelling: wraps actual in a MultiNodeOptimizer over comm.
std::unique_ptr<MultiNodeOptimizer> create_multi_node_optimizer(
    std::unique_ptr<optim::Optimizer> actual, std::shared_ptr<comm::Communicator> comm,
    profile::TimingMode mode = profile::TimingMode::kNonIntrusive);

}  // namespace dpl::parallel
