#include "parallel/data_parallel_stage.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dpl/core/clock.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::parallel {

namespace {
// Waits for the device's queued work, so that a synchronized phase ends when its work does.
void synchronize(Device device) {
  if (device.is_cuda()) cuda::synchronize(device.index);
}
}  // namespace

void DataParallelStage::set_timing_mode(profile::TimingMode mode) {
  mode_ = mode;
  comm_->set_synchronized(mode == profile::TimingMode::kSynchronized);
}

void DataParallelStage::setup(nn::Module& model) {
  model_ = &model;
  reducer_ = std::make_unique<GradientReducer>(model, comm_);
  reducer_->set_overlap(overlap_);
  broadcast_parameters();
  next().setup(model);
  // The wrapped optimizer may have recast the model (MixedPrecision builds its float32 masters
  // from the weights just broadcast, then casts them): check and align the ranks on the arena
  // that training will use, now rather than at the first update.
  if (reducer_->needs_broadcast()) broadcast_parameters();
  if (overlap_.enabled)
    reducer_->check_overlap_supported("MultiNodeOptimizer with overlap", next().gradient_ranges().gradients.defined());
  shard_arena_numel_ = -1;  // a new model: lay the shard out again
  if (shard_) lay_out_shard();
}

void DataParallelStage::set_shard_optimizer_state(bool on) {
  const char* who = "MultiNodeOptimizer::set_shard_optimizer_state";
  DPL_CHECK(!(on && overlap_.enabled), who, ": not with overlap yet (the sharded step reduce-scatters after backward); ",
            "turn overlap off first");
  DPL_CHECK(!replay_, who, ": not in replay mode; leave it first");
  shard_ = on;
  if (model_ == nullptr) return;
  if (on) {
    shard_arena_numel_ = -1;
    lay_out_shard();
  } else {
    next().set_state_shard(0, -1);
    shard_begin_ = 0;
    shard_numel_ = -1;
    scatter_send_ = scatter_recv_ = gather_send_ = gather_recv_ = Tensor();
  }
}

std::int64_t DataParallelStage::optimizer_state_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& [name, t] : next().state())
    bytes += t.numel() * static_cast<std::int64_t>(dtype_size(t.dtype()));
  return bytes;
}

void DataParallelStage::lay_out_shard() {
  nn::ParameterArena& arena = target().arena();
  if (arena.numel() == shard_arena_numel_ && arena.id() == shard_arena_id_) return;
  const char* who = "sharded optimizer state";
  DPL_CHECK(!next().gradient_ranges().gradients.defined(), who, ": expected a float32 model whose own gradients the ",
            "optimizer reads; this optimizer prepares float32 gradients of its own (optim::MixedPrecision), whose ",
            "master weights are not sharded yet");
  DPL_CHECK(arena.dtype() == kFloat32, who, ": expected a float32 model, got parameters of ", arena.dtype());
  const std::int64_t n = arena.numel(), p = comm_->size(), r = comm_->rank();
  // Equal blocks, as the reduce-scatter and the allgather move them; the last may be shorter,
  // and none may be empty (an empty shard would hold no state to tell apart from none).
  const std::int64_t block = (n + p - 1) / p;
  DPL_CHECK(n > 0 && (p - 1) * block < n, who, ": the model's ", n, " parameter elements are too few to give each of ",
            p, " ranks a shard of ", block, "; shard larger models, or leave the state unsharded");
  shard_block_ = block;
  shard_begin_ = r * block;
  shard_numel_ = std::min(block, n - shard_begin_);
  const TensorOptions o(kFloat32, arena.device());
  if (p > 1) {
    // Zeros, so that the padding past the arena's end (the last block) adds nothing odd.
    scatter_send_ = Tensor::zeros({p * block}, o);
    scatter_recv_ = Tensor::zeros({block}, o);
    gather_send_ = Tensor::zeros({block}, o);
    gather_recv_ = Tensor::zeros({p * block}, o);
  }
  next().set_state_shard(shard_begin_, shard_numel_);
  shard_arena_numel_ = n;
  shard_arena_id_ = arena.id();
}

// The sharded step: each rank receives the mean of its shard of the gradients (one
// reduce-scatter: the bytes of an allreduce's first half), updates the parameters of its shard
// with the state it holds for them, and the ranks then gather each other's updated shards (the
// allreduce's second half).
void DataParallelStage::reduce_scatter_and_step() {
  if (reducer_->needs_broadcast()) broadcast_parameters();
  lay_out_shard();
  const std::vector<Tensor> buffers = prepare_gradients_timed();
  const bool checked = buffers.size() > 1;
  if (checked) local_flag_on(buffers.back().device()).copy_(buffers.back());
  sync_point();
  if (comm_->size() > 1) {
    profile::ScopedPhase phase(timer_, "reduce_scatter", iteration_);
    const Tensor& grads = buffers.front();
    scatter_send_.narrow(0, 0, grads.numel()).copy_(grads);
    comm_->reduce_scatter(scatter_send_, scatter_recv_, comm::ReduceOp::kMean);
    grads.narrow(0, shard_begin_, shard_numel_).copy_(scatter_recv_.narrow(0, 0, shard_numel_));
    for (std::size_t i = 1; i < buffers.size(); ++i) {
      Tensor flag = buffers[i];
      comm_->allreduce(flag, comm::ReduceOp::kMean);
    }
    if (mode_ == profile::TimingMode::kSynchronized) synchronize(target().device());
  }
  // The same averaged flag on every rank: all stop here together, or none does. (The gradients
  // outside a rank's shard are its own, not averaged: the parameter a rank names is the first
  // non-finite one it sees.)
  if (checked && next().stops_on_non_finite() && !next().gradients_finite()) stop_on_every_rank(buffers.front());
  step();
}

void DataParallelStage::gather_parameters() {
  if (comm_->size() == 1) return;
  profile::ScopedPhase phase(timer_, "allgather", iteration_);
  Tensor params = target().arena().params();  // a handle on the arena's storage
  gather_send_.narrow(0, 0, shard_numel_).copy_(params.narrow(0, shard_begin_, shard_numel_));
  comm_->allgather(gather_send_, gather_recv_);
  params.copy_(gather_recv_.narrow(0, 0, params.numel()));
  if (mode_ == profile::TimingMode::kSynchronized) synchronize(target().device());
}

Tensor DataParallelStage::gathered(const Tensor& shard) const {
  const std::int64_t p = comm_->size();
  const TensorOptions o(shard.dtype(), shard.device());
  Tensor send = Tensor::zeros({shard_block_}, o), all = Tensor::empty({p * shard_block_}, o);
  send.narrow(0, 0, shard_numel_).copy_(shard);
  comm_->allgather(send, all);
  return all.narrow(0, 0, shard_arena_numel_).contiguous();
}

std::vector<std::pair<std::string, Tensor>> DataParallelStage::gathered_state() {
  std::vector<std::pair<std::string, Tensor>> out = next().gathered_state();
  if (!shard_ || shard_numel_ <= 0 || comm_->size() == 1) return out;
  // Every state tensor of a sharded (elementwise) rule holds either one value per element of the
  // shard or nothing (a setting's unused state): the same choice on every rank.
  for (auto& [name, t] : out)
    if (t.numel() == shard_numel_) t = gathered(t);
  return out;
}

void DataParallelStage::set_overlap(const OverlapOptions& options) {
  DPL_CHECK(!(options.enabled && shard_), "MultiNodeOptimizer.set_overlap: not with sharded optimizer state yet (the ",
            "sharded step reduce-scatters after backward); turn sharding off first");
  if (reducer_) {
    reducer_->set_overlap(options);
    if (options.enabled)
      reducer_->check_overlap_supported("MultiNodeOptimizer.set_overlap", next().gradient_ranges().gradients.defined());
  }
  overlap_ = options;
}

void DataParallelStage::record_overlap(const OverlapTimes& times) {
  for (std::size_t k = 0; k < times.buckets.size(); ++k) {
    const OverlapTimes::Interval& bucket = times.buckets[k];
    const std::string name = "allreduce/bucket" + std::to_string(k);
    timer_.record(name, bucket.start, bucket.seconds, iteration_);
    // Durations only, as without overlap: laid end to end from the bucket's start.
    double sub_start = bucket.start;
    for (const auto& sub : bucket.phases) {
      timer_.record(name + "/" + sub.name, sub_start, sub.seconds, iteration_);
      sub_start += sub.seconds;
    }
  }
  timer_.record("allreduce/hidden", times.backward_end - times.hidden, times.hidden, iteration_);
  timer_.record("allreduce/total", times.backward_end, times.total, iteration_);
}

void DataParallelStage::broadcast_parameters() {
  reducer_->broadcast_parameters();
  // Gradients travel as float32 buffers of the arena's length (a 16-bit model's through its
  // float32 master gradients), whatever the dtype of the parameters.
  timer_.set_allreduce_size(static_cast<std::size_t>(reducer_->model().arena().numel()) * dtype_size(kFloat32),
                            comm_->size());
}

void DataParallelStage::sync_point() {
  if (mode_ != profile::TimingMode::kSynchronized) return;
  synchronize(target().device());
  comm_->barrier();
}

// local_flag_, a float32 scalar on `device` (allocated once, again only if the device changes).
Tensor& DataParallelStage::local_flag_on(Device device) {
  if (!local_flag_.defined() || local_flag_.device() != device)
    local_flag_ = Tensor::empty({1}, TensorOptions(kFloat32, device));
  return local_flag_;
}

// The wrapped optimizer's preparation of what the allreduce averages (a 16-bit model's float32
// master gradients, the non-finite check), timed as "prepare": a pass over every gradient that
// no other phase covers.
std::vector<Tensor> DataParallelStage::prepare_gradients_timed() {
  profile::ScopedPhase phase(timer_, "prepare", iteration_);
  std::vector<Tensor> buffers = next().prepare_gradients();
  if (mode_ == profile::TimingMode::kSynchronized) synchronize(target().device());
  return buffers;
}

// The wrapped optimizer's step, timed as "optimize", once the gradients are averaged; then,
// under BufferSync::kEveryStep, the buffers.
void DataParallelStage::step() {
  loss_ = Tensor();
  sync_point();
  {
    profile::ScopedPhase phase(timer_, "optimize", iteration_);
    next().update();
    if (mode_ == profile::TimingMode::kSynchronized) synchronize(target().device());
  }
  if (shard_) gather_parameters();
  if (buffer_sync_ == BufferSync::kEveryStep) synchronize_buffers();
  ++iteration_;
}

void DataParallelStage::synchronize_buffers() {
  DPL_CHECK(reducer_ != nullptr, "MultiNodeOptimizer::synchronize_buffers: call setup(model) first");
  if (comm_->size() == 1) return;  // nothing to make equal, and no phase to report
  profile::ScopedPhase phase(timer_, "buffers", iteration_);
  reducer_->synchronize_buffers();
  if (mode_ == profile::TimingMode::kSynchronized) synchronize(target().device());
}

void DataParallelStage::allreduce_and_step(bool overlapped) {
  if (shard_) return reduce_scatter_and_step();
  nn::Module& model = target();
  if (overlapped) {
    // The buckets were averaged during backward; the exposed part is what is left to wait for.
    // Each bucket was checked on this rank before its allreduce (local_flag_, this rank's own
    // verdict): the wrapped optimizer takes that as its flag instead of another pass over the
    // gradients, and the flag is averaged as it is without overlap, so every rank reads the same
    // verdict. Without a flag (policy off), a float16 model's overflow check still passes over
    // its masters.
    const bool checked = next().non_finite_policy() != optim::NonFinitePolicy::kOff;
    OverlapTimes times;
    std::vector<Tensor> buffers;
    {
      profile::ScopedPhase phase(timer_, "allreduce", iteration_);
      times = reducer_->finish_backward();
      if (checked) {
        buffers = next().adopt_prepared_gradients(local_flag_);
        if (buffers.size() > 1) comm_->allreduce(buffers.back(), comm::ReduceOp::kMean);
      }
    }
    record_overlap(times);
    if (!checked) buffers = prepare_gradients_timed();
    if (buffers.size() > 1 && next().stops_on_non_finite() && !next().gradients_finite())
      stop_on_every_rank(buffers.front());
    step();
    return;
  }
  if (reducer_->needs_broadcast()) broadcast_parameters();
  // What is averaged is what the wrapped optimizer will read: the arena's gradients, or a mixed
  // precision optimizer's float32 master gradients and overflow flag.
  const std::vector<Tensor> buffers = prepare_gradients_timed();
  // A second buffer is the non-finite flag of this rank alone; the allreduce turns it into the
  // mean of every rank's, so keep a copy (four bytes, on the device) to name the ranks later.
  const bool checked = buffers.size() > 1;
  if (checked) {
    const Tensor& flag = buffers.back();
    local_flag_on(flag.device()).copy_(flag);
  }
  sync_point();
  const double allreduce_start = now_seconds();
  {
    profile::ScopedPhase phase(timer_, "allreduce", iteration_);
    reducer_->allreduce_gradients(buffers);
    if (mode_ == profile::TimingMode::kSynchronized) synchronize(model.device());
  }
  // The communicator reports durations only; its sub-phases run one after another from the
  // allreduce's start, so that is where a timeline draws them.
  double sub_start = allreduce_start;
  for (const auto& sub : reducer_->last_phases()) {
    timer_.record("allreduce/" + sub.name, sub_start, sub.seconds, iteration_);
    sub_start += sub.seconds;
  }
  // The same averaged flag on every rank: all stop here together, or none does.
  if (checked && next().stops_on_non_finite() && !next().gradients_finite()) stop_on_every_rank(buffers.front());
  step();
}

void DataParallelStage::update() {
  DPL_CHECK(model_ != nullptr, "MultiNodeOptimizer: call setup(model) before update()");
  allreduce_and_step(false);
}

Variable DataParallelStage::update(const std::function<Variable(int)>& loss_fn, int micro_batches) {
  DPL_CHECK(model_ != nullptr, "MultiNodeOptimizer: call setup(model) before update()");
  if (replay_) {
    // Recorded, not run (one process: nothing to average); no phase is timed here.
    DPL_CHECK(micro_batches == 1, "MultiNodeOptimizer::update: a recorded step takes one micro-batch, got ",
              micro_batches);
    target().zero_grad();
    Variable loss = loss_fn(0);
    next().backward(loss);
    loss_ = replay_loss_ = loss.data();
    replay_buffers_ = next().prepare_gradients();
    if (replay_buffers_.size() > 1) local_flag_on(replay_buffers_.back().device()).copy_(replay_buffers_.back());
    next().update();
    return loss;
  }
  sync_point();
  Variable loss;
  const bool overlapped = overlap_.enabled && comm_->size() > 1;
  const bool synchronized = mode_ == profile::TimingMode::kSynchronized;
  // The forward and backward passes of every micro-batch, summed into the two sub-phases.
  double forward_seconds = 0.0, backward_seconds = 0.0, forward_start = 0.0;
  {
    profile::ScopedPhase phase(timer_, "compute", iteration_);
    target().zero_grad();
    double mark = forward_start = now_seconds();
    loss = accumulate_gradients(loss_fn, micro_batches, [&](int i, const Variable& micro_loss) {
      if (synchronized) synchronize(target().device());
      const double forward_end = now_seconds();
      forward_seconds += forward_end - mark;
      // Only the last micro-batch's backward averages, bucket by bucket (DDP's no_sync for the
      // others): the buckets are final only when every micro-batch has added its gradients.
      if (overlapped && i == micro_batches - 1) {
        if (reducer_->needs_broadcast()) broadcast_parameters();
        // This rank's own non-finite verdict, raised bucket by bucket before averaging.
        Tensor* flag = nullptr;
        if (next().non_finite_policy() != optim::NonFinitePolicy::kOff) {
          flag = &local_flag_on(target().device());
          flag->fill_(0.0);
        }
        // A 16-bit model's float32 master gradients are filled bucket by bucket on the way.
        reducer_->begin_backward(flag, next().gradient_ranges());
      }
      next().backward(micro_loss);
      if (synchronized) synchronize(target().device());
      mark = now_seconds();
      backward_seconds += mark - forward_end;
    });
    loss_ = loss.data();
  }
  // Recorded after their phase, so that each sub-phase's series follows its parent's: the
  // forward passes from the phase's start, the backward passes after them.
  timer_.record("compute/forward", forward_start, forward_seconds, iteration_);
  timer_.record("compute/backward", forward_start + forward_seconds, backward_seconds, iteration_);
  allreduce_and_step(overlapped);
  return loss;
}

std::string DataParallelStage::replay_refusal() const {
  if (shard_) return "a step with sharded optimizer state cannot be recorded yet";
  if (comm_->size() > 1)
    return "a recorded step of " + std::to_string(comm_->size()) +
           " processes is not supported yet (the allreduce's phase timing and its MPI paths run on the host)";
  return next().replay_refusal();
}

void DataParallelStage::set_replay_mode(bool on, const Tensor& skip_flag) {
  if (!on) {
    next().set_replay_mode(false, Tensor());
    replay_ = false;  // the recorded step's buffers stay, as in Optimizer::set_replay_mode
    return;
  }
  DPL_CHECK(model_ != nullptr, "MultiNodeOptimizer: call setup(model) before set_replay_mode()");
  const std::string why = replay_refusal();
  DPL_CHECK(why.empty(), "MultiNodeOptimizer::set_replay_mode: this optimizer cannot run a recorded step: ", why);
  if (reducer_->needs_broadcast()) broadcast_parameters();
  next().set_replay_mode(true, skip_flag);
  replay_ = true;
}

void DataParallelStage::prepare_replay() {
  DPL_CHECK(replay_, "MultiNodeOptimizer::prepare_replay: not in replay mode (call set_replay_mode(true) first)");
  replay_start_ = now_seconds();
  next().prepare_replay();
}

void DataParallelStage::finish_replay() {
  DPL_CHECK(replay_ && !replay_buffers_.empty(), "MultiNodeOptimizer::finish_replay: no recorded step in replay mode");
  // As after an unrecorded allreduce: the flag's verdict is the same on every rank.
  if (replay_buffers_.size() > 1 && next().stops_on_non_finite() && !next().gradients_finite()) {
    loss_ = replay_loss_;
    stop_on_every_rank(replay_buffers_.front());
  }
  next().finish_replay();
  if (mode_ == profile::TimingMode::kSynchronized) synchronize(target().device());
  timer_.record("step", replay_start_, now_seconds() - replay_start_, iteration_);
  ++iteration_;
}

namespace {
// "1" or "0, 2": the ranks whose entry of an allgathered (rank, field) table is non-zero.
std::string ranks_where(const std::vector<float>& table, int fields, int field) {
  std::string out;
  for (std::size_t r = 0; r * static_cast<std::size_t>(fields) < table.size(); ++r)
    if (table[r * static_cast<std::size_t>(fields) + static_cast<std::size_t>(field)] != 0.f)
      out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}
}  // namespace

void DataParallelStage::stop_on_every_rank(const Tensor& averaged_grads) {
  // Per rank: its own flag, and its loss: 1 non-finite, 0 finite, -1 not seen (update() without
  // a loss function is the same call on every rank, so -1 is everyone's or no one's).
  const float loss_state = !loss_.defined() ? -1.f : std::isfinite(loss_.to(kFloat32).item()) ? 0.f : 1.f;
  const std::vector<float> mine_values = {local_flag_.item(), loss_state};
  const Device device = averaged_grads.device();
  const Tensor mine = Tensor::from_vector(mine_values, {2}, device);
  Tensor all = Tensor::empty({2 * static_cast<std::int64_t>(comm_->size())}, TensorOptions(kFloat32, device));
  comm_->allgather(mine, all);
  const std::vector<float> table = all.to(Device::cpu()).to_vector<float>();
  const std::string bad_ranks = ranks_where(table, 2, 0);
  const std::string bad_losses = ranks_where(table, 2, 1);
  std::string loss_words;
  if (loss_state < 0.f) loss_words = "the loss was not seen (update() without a loss function)";
  else if (bad_losses.empty()) loss_words = "the loss was finite on every rank";
  else loss_words = "the loss was non-finite on rank(s) " + bad_losses;
  // The averaged gradients are the same on every rank and keep each rank's Inf and NaN, so
  // every rank names the same parameter.
  const std::string parameter = optim::first_non_finite_parameter(target(), averaged_grads);
  loss_ = Tensor();
  DPL_FAIL(optim::non_finite_message(next().iteration() + 1, parameter, " on rank(s) " + bad_ranks,
                                             loss_words));
}

profile::Summary DataParallelStage::summary(std::int64_t skip_warmup) const {
  return profile::summarize(timer_, comm_.get(), skip_warmup);
}

}  // namespace dpl::parallel
