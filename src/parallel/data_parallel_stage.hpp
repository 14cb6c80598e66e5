#pragma once
// DataParallelStage: MultiNodeOptimizer's stage. In front of the wrapped optimizer's pipeline it
// times the step's phases, averages what the wrapped pipeline's prepare_gradients() returns over
// the ranks (after backward, or bucket by bucket during it) or, with sharded optimizer state
// (ZeRO stages 1 and 2), reduce-scatters it and allgathers the updated parameters, and stops
// every rank together on a non-finite step.

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "dpl/comm/communicator.hpp"
#include "dpl/optim/step_pipeline.hpp"
#include "dpl/parallel/gradient_reducer.hpp"
#include "dpl/profile/phase_timer.hpp"

namespace dpl::parallel {

class DataParallelStage final : public optim::StepStage {
 public:
  /// Requires a non-null communicator (MultiNodeOptimizer checks it).
  DataParallelStage(std::shared_ptr<comm::Communicator> comm, profile::TimingMode mode) : comm_(std::move(comm)) {
    set_timing_mode(mode);
  }

  void setup(nn::Module& model) override;
  void update() override;
  Variable update(const std::function<Variable(int)>& loss_fn, int micro_batches) override;
  std::string replay_refusal() const override;
  void set_replay_mode(bool on, const Tensor& skip_flag) override;
  void prepare_replay() override;
  void finish_replay() override;
  /// False: this stage reads the verdict itself, in finish_replay().
  bool can_defer_verdict() const override { return false; }

  // What MultiNodeOptimizer's own methods of the same names do.
  void set_overlap(const OverlapOptions& options);
  const OverlapOptions& overlap() const { return overlap_; }
  void set_zero_stage(int stage);
  int zero_stage() const { return zero_stage_; }
  std::int64_t optimizer_state_bytes() const;
  /// Under sharding: every rank's shard of each per-element state tensor, gathered (collective).
  std::vector<std::pair<std::string, Tensor>> gathered_state() override;
  void set_buffer_sync(BufferSync when) { buffer_sync_ = when; }
  BufferSync buffer_sync() const { return buffer_sync_; }
  void synchronize_buffers();
  comm::Communicator& communicator() const { return *comm_; }
  profile::PhaseTimer& timer() { return timer_; }
  const profile::PhaseTimer& timer() const { return timer_; }
  profile::TimingMode timing_mode() const { return mode_; }
  void set_timing_mode(profile::TimingMode mode);
  profile::Summary summary(std::int64_t skip_warmup) const;

 private:
  void broadcast_parameters();
  void allreduce_and_step(bool overlapped);
  // Sharded optimizer state: this rank's shard of the current arena, told to the pipeline when
  // it changed; the sharded step (reduce-scatter, update of the shard, allgather); this rank's
  // part of the averaged gradients handed to the pipeline; one gathered per-element tensor.
  void lay_out_shard();
  void drop_shard();
  void reduce_scatter_and_step(bool overlapped);
  void deliver_shard_gradients(const Tensor& grads);
  void gather_parameters();
  // Segment k's reduce-scatter buffers (BucketScatter): its part of scatter_recv_, and its tail's.
  BucketScatter segment_scatter(std::size_t k) const;
  std::vector<BucketScatter> bucket_scatters() const;
  Tensor gathered(const Tensor& shard) const;
  void scatter_gathered(const Tensor& all, Tensor& into) const;
  std::vector<Tensor> prepare_gradients_timed();
  void step();
  Tensor& local_flag_on(Device device);
  void record_overlap(const OverlapTimes& times, const std::string& phase);
  void sync_point();
  // The failure path of kStop: collective, reached by every rank alike (the averaged flag is the
  // same everywhere); throws the message naming the ranks.
  [[noreturn]] void stop_on_every_rank(const Tensor& averaged_grads);

  std::shared_ptr<comm::Communicator> comm_;
  profile::TimingMode mode_ = profile::TimingMode::kNonIntrusive;
  profile::PhaseTimer timer_;
  nn::Module* model_ = nullptr;               // from setup()
  std::unique_ptr<GradientReducer> reducer_;  // over the model, from setup()
  std::int64_t iteration_ = 0;
  Tensor loss_;                         // the loss of the update(loss_fn) under way, for messages
  Tensor replay_loss_;                  // the recorded step's loss
  double replay_start_ = 0.0;           // when prepare_replay() began, for the "step" phase
  std::vector<Tensor> replay_buffers_;  // what the recorded step's prepare_gradients() gave
  Tensor local_flag_;  // this rank's own non-finite flag, kept from before the allreduce averages it
  OverlapOptions overlap_;
  BufferSync buffer_sync_ = BufferSync::kBeforeUse;
  // Sharding (ZeRO stage 1 or 2; 0: off). The arena is cut into segments (stage 1: one, the
  // whole arena; stage 2: the overlap's buckets), in arena order. Of a segment's n elements the
  // first p * part (part = n / p) are one part per rank in rank order, so that they are the
  // reduce-scatter's input and the allgather's output in place, with no copy; the last `tail`
  // (fewer than p) go one to each of the first ranks, padded to p elements for their own
  // collectives. A rank's pieces sit one after the other in its block of shard_block_ elements,
  // segment k's part at `offset` and its tail element after it; its shard is its pieces,
  // shard_numel_ elements in all, of an arena of shard_arena_numel_ elements (id shard_arena_id_).
  // segment_of_bucket_: stage 2's bucket k is segment segment_of_bucket_[k]. The buffers: this
  // rank's block of the reduce-scatter's output (float32); each segment's tail, p elements of
  // the reduce-scatter's input (float32) and of the allgather's output (the arena's dtype), one
  // of the allgather's input; the allgather's output where it cannot run in place (device
  // buffers: the staged host communicators refuse it).
  struct Segment {
    std::int64_t begin = 0, end = 0, part = 0, tail = 0, offset = 0;
    // Calls f(arena offset, elements, offset in the rank's block) for each of rank r's pieces.
    template <typename F>
    void for_each_piece(std::int64_t r, F&& f) const {
      if (part > 0) f(begin + r * part, part, offset);
      if (r < tail) f(end - tail + r, std::int64_t{1}, offset + part);
    }
  };
  int zero_stage_ = 0;
  std::vector<Segment> segments_;
  std::vector<std::size_t> segment_of_bucket_;
  std::vector<optim::ArenaRange> shard_ranges_;
  std::int64_t shard_numel_ = -1, shard_block_ = 0, shard_arena_numel_ = -1;
  std::uint64_t shard_arena_id_ = 0;
  Tensor scatter_recv_, scatter_tails_, gather_tails_send_, gather_tails_, gather_recv_;
};

}  // namespace dpl::parallel
