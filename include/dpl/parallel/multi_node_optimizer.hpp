#pragma once
// MultiNodeOptimizer: turns any optimizer into a data-parallel one.

#include <memory>

#include "dpl/comm/communicator.hpp"
#include "dpl/optim/optimizer.hpp"
#include "dpl/parallel/gradient_reducer.hpp"
#include "dpl/profile/phase_timer.hpp"

namespace dpl::parallel {

class DataParallelStage;

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
///
/// Everything else is the wrapped optimizer's, through its step pipeline, which this optimizer's
/// stage sits in front of (see docs/architecture.md, "The step pipeline"): lr(), t(), the
/// non-finite policy and counters, and the state, which load_state() restores locally on each
/// rank (no communication). Gradient hooks (add_gradient_hook) run inside the optimize phase,
/// after the allreduce, on the averaged gradients, which are the same on every rank (so a norm
/// a hook computes agrees across ranks without communication); under sharded optimizer state
/// (set_zero_stage) their sharded forms run on this rank's shard instead (clipping: one allreduce
/// of each rank's sum of squares).
///
/// Replay mode (optim::Optimizer::set_replay_mode, for train::CapturedStep): one process only
/// for now (the communicators time their phases on the host and the MPI ones call MPI from the
/// host, neither of which a recording can hold), without overlap; then the wrapped optimizer
/// decides. Under replay the timer records one phase per step, "step" (forward, backward and
/// optimize together: a recording cannot be split), from prepare_replay() to finish_replay().
/// The verdict is read in finish_replay() (can_defer_verdict() is false).
class MultiNodeOptimizer : public optim::OptimizerWrapper {
 public:
  /// Adds the data-parallel stage in front of actual's step pipeline. Requires a non-null actual
  /// and a non-null communicator (dpl::Error otherwise); the optimizer shares the communicator's
  /// ownership, so it stays alive as long as the optimizer does.
  MultiNodeOptimizer(std::unique_ptr<optim::Optimizer> actual, std::shared_ptr<comm::Communicator> comm,
                     profile::TimingMode mode = profile::TimingMode::kNonIntrusive);
  ~MultiNodeOptimizer() override;

  /// Overlap of the allreduce with backward (OverlapOptions; off by default). With it on,
  /// update(loss_fn) arms the reducer before backward, so each bucket of gradients is averaged on
  /// a worker thread as soon as backward has finished it; the "allreduce" phase is then the
  /// exposed part (what the step waited for after backward), and the phases "allreduce/hidden"
  /// (bucket time that ran during backward), "allreduce/total" and "allreduce/bucket<k>" say the
  /// rest. update() after a hand-driven backward reduces after backward as before. Results are
  /// bit-identical to the same buckets reduced after backward. On a GPU the buckets run on a side
  /// stream (GradientReducer::begin_backward). Requires a float32 model, or a wrapped optimizer
  /// that prepares float32 gradient ranges (optim::MixedPrecision), MPI initialised for
  /// calls from a second thread (checked at setup(), or here when already set up), and ZeRO
  /// stage 0 or 2, not 1 (dpl::Error otherwise). Under stage 2 the buckets are reduce-scattered.
  void set_overlap(const OverlapOptions& options);
  const OverlapOptions& overlap() const;

  /// Sharded optimizer state, as DeepSpeed's ZeRO stages (0 by default: off; see
  /// docs/communicators.md, "Sharded optimizer state (ZeRO)"). Stage 1: each of the p ranks keeps
  /// the optimizer's per-element state (Adam's moments, a momentum) and, under
  /// optim::MixedPrecision, the float32 master weights, for about 1/p of the parameter arena
  /// only, and each update runs
  ///   reduce_scatter (each rank receives the mean of its part of the gradients: float32, a
  ///     16-bit model's float32 master gradients)
  ///   → optimize (the wrapped optimizer's update of that part, with the state it holds)
  ///   → allgather (every rank receives every part's updated parameters, in the model's dtype),
  /// which moves the bytes of one allreduce (a 16-bit model's allgather half as many).
  /// Stage 2 cuts the arena at the overlap's buckets (OverlapOptions) and gives each rank a part
  /// of every bucket; with overlap on, each bucket is reduce-scattered on the worker thread as
  /// soon as backward has finished it ("reduce_scatter" is then the exposed part, with
  /// "reduce_scatter/hidden", ".../total" and ".../bucket<k>" as under overlap), so that after
  /// backward each rank holds the averaged gradients of its part only; with overlap off the
  /// buckets are reduce-scattered one by one after backward. The parameters equal the unsharded
  /// step's up to the order of the reduction's sums (each communicator's reduce_scatter against
  /// its allreduce), and every stage takes the same steps (the non-finite and float16 overflow
  /// verdicts are averaged flags, as unsharded). optimizer_state_bytes() falls as 1/p.
  /// optim::Optimizer::state() then holds this rank's part; gathered_state() (collective), which
  /// train::save_checkpoint saves, the whole arena's, so a checkpoint is the same as an unsharded
  /// one and loads either way. Requires an elementwise rule (SGD, MomentumSGD, Adam, AdamW,
  /// RMSprop, Adagrad: not LAMB or LARS), a float32 model or a 16-bit one under
  /// optim::MixedPrecision, no gradient hook without a sharded form (clip_gradients has one), no
  /// replay mode, overlap only with stage 2, and at
  /// least one arena element for every rank (dpl::Error otherwise, on every rank). The
  /// reduce-scatter runs in float32 whatever CommOptions::allreduce_dtype says. Changing the
  /// stage after setup() starts the state again from zero (and a 16-bit model's masters from its
  /// weights): choose before training.
  void set_zero_stage(int stage);
  int zero_stage() const;
  /// set_zero_stage(on ? 1 : 0), and whether the stage is not 0.
  void set_shard_optimizer_state(bool on);
  bool shards_optimizer_state() const;
  /// The bytes of optimizer state this rank holds (every state tensor of the wrapped optimizer).
  std::int64_t optimizer_state_bytes() const;

  /// When every rank's buffers are made equal (BufferSync; kBeforeUse by default: train::Trainer
  /// does it before its extensions run and at the end of a run). Under kEveryStep each update
  /// ends with synchronize_buffers(), timed as the phase "buffers".
  void set_buffer_sync(BufferSync when);
  BufferSync buffer_sync() const;
  /// Makes every rank's buffers equal now (GradientReducer::synchronize_buffers), timed as the
  /// phase "buffers". Requires setup(); collective. Call it before reading the model on every
  /// rank (evaluating, saving) in a loop of one's own.
  void synchronize_buffers();

  comm::Communicator& communicator() const;
  /// This rank's phase times.
  profile::PhaseTimer& timer();
  const profile::PhaseTimer& timer() const;
  /// The timing mode chosen at construction (may be changed between updates).
  profile::TimingMode timing_mode() const;
  void set_timing_mode(profile::TimingMode mode);
  /// Summary of the phase times across all ranks (collective; see profile::summarize).
  profile::Summary summary(std::int64_t skip_warmup = 1) const;

 private:
  DataParallelStage& stage_;
};

/// ChainerMN's spelling: wraps actual in a MultiNodeOptimizer over comm.
std::unique_ptr<MultiNodeOptimizer> create_multi_node_optimizer(
    std::unique_ptr<optim::Optimizer> actual, std::shared_ptr<comm::Communicator> comm,
    profile::TimingMode mode = profile::TimingMode::kNonIntrusive);

}  // namespace dpl::parallel
