#pragma once
// GradientReducer: the communication of data-parallel training over one model's flat arenas.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "dpl/comm/communicator.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/optim/optimizer.hpp"

namespace dpl::parallel {

/// Overlap of the gradient allreduce with backward (see docs/communicators.md, "Overlap").
struct OverlapOptions {
  /// Start each bucket's allreduce while backward still runs. Off: one allreduce of the whole
  /// arena after backward.
  bool enabled = false;
  /// Bytes of gradients per bucket (PyTorch DDP's default, 25 MiB) ...
  std::size_t bucket_bytes = std::size_t{25} << 20;
  /// ... and of the first bucket, the one backward finishes first: small, so that communication
  /// starts early (DDP's 1 MiB).
  std::size_t first_bucket_bytes = std::size_t{1} << 20;
};

/// One bucket of a gradient arena: elements [begin, end) of it, holding whole parameters
/// (indices into the arena's entries(), in arena order) and the padding after them.
struct Bucket {
  std::int64_t begin = 0, end = 0;
  std::vector<std::size_t> parameters;
};

/// Cuts an arena into buckets in the order backward finishes its gradients: the last parameters
/// registered (the output layer) first. Walking from the arena's end, a bucket closes at a
/// parameter boundary once it holds at least first_bucket_bytes (the first) or bucket_bytes
/// (the others) of element_bytes-sized elements; a parameter larger than that is a bucket of its
/// own. The buckets cover the arena exactly, without overlap; an empty arena has none. Requires
/// both sizes and element_bytes >= 1 (else dpl::Error).
std::vector<Bucket> plan_buckets(const nn::ParameterArena& arena, std::size_t element_bytes,
                                 std::size_t first_bucket_bytes, std::size_t bucket_bytes);

/// Where one bucket of n elements is reduce-scattered instead of allreduced (ZeRO stage 2, see
/// GradientReducer::begin_backward), over p = size() ranks with m = recv.numel() = n / p: the
/// bucket's first p * m elements straight from the gradients, this rank's m elements of their mean
/// into `recv`; the last n - p * m (fewer than p) copied into `tail_send` (p float32 elements, zeros
/// past them) and this rank's element of their mean into `tail_recv` (one element). The tail
/// buffers are undefined when p divides n.
struct BucketScatter {
  Tensor recv, tail_send, tail_recv;
};

/// Times of one overlapped allreduce, in now_seconds() terms (dpl/core/clock.hpp).
struct OverlapTimes {
  struct Interval {
    double start = 0.0, seconds = 0.0;
    /// The communicator's sub-phases of this bucket's allreduce, one after another from start
    /// (comm::Communicator::last_phases). Host buckets only: a GPU bucket's allreduce is queued
    /// on the side lane, where the host's durations would be its queueing.
    std::vector<comm::SubPhase> phases;
  };
  std::vector<Interval> buckets;  // each bucket's allreduce, in bucket order
  double backward_end = 0.0;      // when finish_backward() was called
  double exposed = 0.0;           // seconds finish_backward() waited for the buckets
  double hidden = 0.0;            // seconds of bucket allreduces that ran before backward_end
  double total = 0.0;             // seconds of all bucket allreduces
};

class BucketWorker;

/// When MultiNodeOptimizer makes every rank's buffers (BatchNorm's running statistics and
/// counters) equal; see GradientReducer::synchronize_buffers. Each rank's buffers follow its own
/// batches, so without this they drift apart while the weights stay equal, and an evaluation on
/// every rank, or the weights saved from rank 0, would use statistics no other rank has.
enum class BufferSync {
  /// Before the model is used outside a step: train::Trainer synchronises before the
  /// extensions of an iteration at which any fires (evaluation, snapshots, reports) and at the
  /// end of the run. The default: one small collective per firing, nothing per step.
  kBeforeUse,
  /// After every update as well (the "buffers" phase of each step), as PyTorch's DDP broadcasts
  /// its buffers every forward.
  kEveryStep,
  /// Never: each rank keeps its own buffers (Trainer does not synchronise them).
  kOff,
};

/// Keeps the ranks' copies of one model in step: once, every rank takes rank 0's parameters;
/// every step, every rank's gradients become their mean over all ranks. Each is one collective
/// over the model's flat arena (nn::ParameterArena), never a loop over parameters.
///
/// Requires the model to outlive the reducer (the reducer shares the communicator's ownership),
/// and every rank to make the same calls in the same order (they are collective over the
/// communicator).
class GradientReducer {
 public:
  /// A reducer for model over comm. Requires a non-null comm (dpl::Error otherwise).
  /// Communicates nothing.
  GradientReducer(nn::Module& model, std::shared_ptr<comm::Communicator> comm);

  /// Every rank's parameters and buffers = rank 0's (one broadcast of the parameter arena, one per
  /// buffer). First checks that every rank's model has the same parameters and buffers (names,
  /// shapes, dtypes, in order); if not, every rank throws the same dpl::Error naming the ranks
  /// that differ from rank 0 and their first differing entry, and nothing is broadcast. Ensures
  /// needs_broadcast() is false after.
  void broadcast_parameters();
  /// Makes every rank's buffers equal: each floating-point buffer becomes its mean over the ranks
  /// (ChainerMN's allreduce_persistent; for running variances that is the mean of the ranks'
  /// estimates, not the variance of the union of their batches), in one allreduce of all of them
  /// packed into float32; every other buffer (counters such as num_batches_tracked) takes rank
  /// 0's value. Requires the same buffers on every rank (broadcast_parameters checks them); with
  /// one rank it does nothing. Collective.
  void synchronize_buffers();

  /// Every rank's gradients = their mean over all ranks: one allreduce (kMean) of the gradient
  /// arena, carried in the communicator's CommOptions::allreduce_dtype (a 16-bit type needs the
  /// arena on a GPU and an NCCL communicator, else dpl::Error). Requires a float32 arena: a
  /// model cast to 16 bits is reduced through its optimizer's float32 master gradients (the
  /// overload below, which MultiNodeOptimizer calls). With one rank, or no parameters,
  /// nothing is communicated. Requires the same model on every rank (broadcast_parameters checks
  /// it). The padding between parameters is zero on every rank, so it stays zero.
  void allreduce_gradients();

  /// As allreduce_gradients(), over the buffers an optimizer's prepare_gradients() returned
  /// instead of the arena's gradients: buffers[0] holds the gradients (float32, the arena's
  /// element count: MixedPrecision's master gradients of a 16-bit model) and is carried in
  /// CommOptions::allreduce_dtype; the others (a one-element non-finite or overflow flag) are averaged in
  /// float32, before the gradients, so that last_phases() describes the gradients' allreduce.
  /// Requires at least one buffer, each float32 and contiguous on the arena's device.
  void allreduce_gradients(const std::vector<Tensor>& buffers);

  /// True until broadcast_parameters() has run on the model's current arena, and again once the
  /// model repacks it (a parameter added, or data replaced): then the ranks must be checked and
  /// brought back in step before the next allreduce_gradients().
  bool needs_broadcast();

  /// The sub-phases of the last allreduce_gradients() (empty when it communicated nothing, or
  /// for single-step algorithms); see comm::Communicator::last_phases.
  const std::vector<comm::SubPhase>& last_phases() const;

  /// Sets the overlap options (see OverlapOptions); they apply from the next begin_backward().
  /// Requires positive bucket sizes (else dpl::Error).
  void set_overlap(const OverlapOptions& options);
  const OverlapOptions& overlap() const { return overlap_; }
  /// The buckets of the current arena under the overlap options (float32 elements).
  const std::vector<Bucket>& buckets();

  /// Arms the overlapped allreduce for the one backward pass that follows: as backward finishes
  /// the last gradient of a bucket, that bucket's allreduce (kMean, in the communicator's
  /// CommOptions::allreduce_dtype) starts on a worker thread; buckets start in bucket order on
  /// every rank whatever order backward finishes them in, so the collectives match. What is
  /// reduced is the model's float32 gradient arena, or, when `ranges` names gradients (an
  /// optimizer's float32 master gradients of a 16-bit model, optim::GradientRanges), that buffer,
  /// each bucket filled by ranges.prepare before its allreduce. When local_flag is given (a
  /// one-element float32 tensor on the arena's device), each bucket is checked for Inf and NaN
  /// before its allreduce and the flag raised (set to 1) when one is found: this rank's own
  /// verdict, before averaging mixes the ranks'. In host memory the filling and the check run on
  /// the calling thread, inside backward, as each bucket becomes final (or in finish_backward()
  /// for the buckets backward did not reach); the worker thread only communicates. Requires
  /// overlap enabled, a float32 arena unless `ranges` names the buffer, an MPI runtime that
  /// allows calls from a second thread, and no begin_backward() armed already (else dpl::Error). Nothing may use the communicator or the
  /// gradient buffers, other than backward writing the arena, until finish_backward() returns.
  ///
  /// On a GPU the worker thread queues each bucket's work (the range's preparation, the check,
  /// the communicator's kernels and NCCL calls) on a side stream of the GPU, which waits for the
  /// point of the compute stream where backward finished the bucket; finish_backward() makes the
  /// compute stream wait for the side stream. See docs/communicators.md, "Overlap on GPUs".
  ///
  /// With `scatter` (one entry per bucket, in bucket order) each bucket is reduce-scattered
  /// (kMean, in float32) instead, once prepared and checked: straight from the gradient buffer but
  /// for its tail (see BucketScatter), this rank's part of the mean received in its recv buffers;
  /// the gradient buffer itself keeps this rank's own (unaveraged) gradients. Requires each
  /// entry's buffers laid out as BucketScatter says, float32 on the arena's device.
  void begin_backward(Tensor* local_flag = nullptr, const optim::GradientRanges& ranges = {},
                      const std::vector<BucketScatter>& scatter = {});
  /// Throws the dpl::Error begin_backward() would throw for the model's arena as it is now
  /// (float32 unless the optimizer prepares float32 gradient ranges, or MPI without
  /// MPI_THREAD_SERIALIZED), naming `who`.
  void check_overlap_supported(const char* who, bool optimizer_prepares_ranges = false);
  /// Ends what begin_backward() armed: starts the buckets backward did not complete (parameters
  /// it never reached keep their zero gradients), waits until every bucket is reduced, and
  /// returns the times. On a GPU it waits until the side stream has finished, and the times are
  /// the GPU's (from events): exposed is how long the side stream ran on after backward's last
  /// kernel. Rethrows the first error of a bucket's allreduce. Requires a begin_backward()
  /// before it.
  OverlapTimes finish_backward();
  /// Whether begin_backward() is armed and finish_backward() not yet called.
  bool backward_armed() const { return armed_; }

  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// The model whose arenas this reducer communicates.
  nn::Module& model() const { return model_; }
  /// The communicator this reducer runs its collectives on.
  comm::Communicator& communicator() const { return *comm_; }

 private:
  nn::Module& model_;
  std::shared_ptr<comm::Communicator> comm_;
  std::uint64_t broadcast_arena_ = 0;  // id of the arena last checked and broadcast (0: none)
  bool communicated_ = false;          // whether the last allreduce_gradients() called the communicator
  // Overlap: the options, the buckets of arena `bucket_arena_` with each parameter's bucket, the
  // parameters carrying this reducer's gradient-ready hooks, and the worker thread.
  void on_gradient_ready(std::size_t parameter);
  void remove_hooks();
  OverlapOptions overlap_;
  std::uint64_t bucket_arena_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;
  std::vector<Variable> hooked_;
  std::vector<std::size_t> hooks_in_bucket_;  // per bucket: parameters that require gradients
  std::vector<std::size_t> pending_;          // per bucket: of those, the ones not final yet
  bool armed_ = false;
  std::unique_ptr<BucketWorker> worker_;
};

/// One-off GradientReducer(model, comm).broadcast_parameters(), for programs that drive the
/// collectives themselves. Borrows comm for the call only.
void broadcast_parameters(nn::Module& model, comm::Communicator& comm);
/// One-off GradientReducer(model, comm).allreduce_gradients().
void allreduce_gradients(nn::Module& model, comm::Communicator& comm);

}  // namespace dpl::parallel
