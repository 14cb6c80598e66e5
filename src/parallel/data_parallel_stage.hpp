#pragma once
// DataParallelStage: MultiNodeOptimizer's stage. In front of the wrapped optimizer's pipeline it
// times the step's phases, averages what the wrapped pipeline's prepare_gradients() returns over
// the ranks (after backward, or bucket by bucket during it), and stops every rank together on a
// non-finite step.

#include <memory>
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
  void set_shard_optimizer_state(bool on);
  bool shards_optimizer_state() const { return shard_; }
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
  // it changed; the sharded step (reduce-scatter, update of the shard, allgather); one gathered
  // per-element tensor.
  void lay_out_shard();
  void reduce_scatter_and_step();
  void gather_parameters();
  Tensor gathered(const Tensor& shard) const;
  std::vector<Tensor> prepare_gradients_timed();
  void step();
  Tensor& local_flag_on(Device device);
  void record_overlap(const OverlapTimes& times);
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
  // Sharding: whether it is on; the shard [begin, begin + numel) of an arena of arena_numel
  // elements (id arena_id), blocks of shard_block_ elements per rank (the last ones shorter);
  // the padded buffers of the reduce-scatter and the allgather.
  bool shard_ = false;
  std::int64_t shard_begin_ = 0, shard_numel_ = -1, shard_block_ = 0, shard_arena_numel_ = -1;
  std::uint64_t shard_arena_id_ = 0;
  Tensor scatter_send_, scatter_recv_, gather_send_, gather_recv_;
};

}  // namespace dpl::parallel
