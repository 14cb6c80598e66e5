#include "parallel/data_parallel_stage.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dpl/core/clock.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/nn/module.hpp"
#include "parallel/bucket_worker.hpp"

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
  if (zero_stage_ > 0) lay_out_shard();
}

void DataParallelStage::set_zero_stage(int stage) {
  const char* who = "MultiNodeOptimizer::set_zero_stage";
  DPL_CHECK(stage >= 0 && stage <= 2, who, ": expected 0 (off), 1 (sharded optimizer state) or 2 (and gradients ",
            "reduce-scattered bucket by bucket), got ", stage);
  DPL_CHECK(!(stage == 1 && overlap_.enabled), who, ": stage 1 reduce-scatters after backward, so not with overlap; ",
            "stage 2 reduce-scatters bucket by bucket during backward (set_zero_stage(2)), or turn overlap off first");
  DPL_CHECK(!(stage > 0 && replay_), who, ": not in replay mode; leave it first");
  const int before = zero_stage_;
  zero_stage_ = stage;
  shard_arena_numel_ = -1;  // lay the shard out again
  if (model_ == nullptr) return;
  if (stage == 0) {
    if (before > 0) drop_shard();
    return;
  }
  try {
    lay_out_shard();
  } catch (...) {
    // Refused (the same refusal on every rank): the stage before stays, laid out as it was.
    zero_stage_ = before;
    shard_arena_numel_ = -1;
    if (before > 0) lay_out_shard();
    else drop_shard();
    throw;
  }
}

void DataParallelStage::drop_shard() {
  next().set_state_shard({});
  segments_.clear();
  segment_of_bucket_.clear();
  shard_ranges_.clear();
  shard_numel_ = -1;
  scatter_recv_ = scatter_tails_ = gather_tails_send_ = gather_tails_ = gather_recv_ = Tensor();
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
  // A 16-bit model's optimizer (MixedPrecision) prepares float32 gradients of its own, and keeps
  // float32 master weights for the shard only.
  const bool masters = next().gradient_ranges().gradients.defined();
  DPL_CHECK(masters || arena.dtype() == kFloat32, who, ": expected a float32 model, or a 16-bit one under ",
            "optim::MixedPrecision, got parameters of ", arena.dtype(), " whose optimizer keeps no float32 masters");
  const std::int64_t n = arena.numel(), p = comm_->size(), r = comm_->rank();
  // The segments, in arena order: stage 2 cuts at the overlap's buckets, so that each bucket is
  // reduce-scattered on its own as backward finishes it.
  std::vector<std::pair<std::int64_t, std::int64_t>> bounds;
  segment_of_bucket_.clear();
  if (zero_stage_ == 2) {
    const std::vector<Bucket>& buckets = reducer_->buckets();
    for (const Bucket& b : buckets) bounds.emplace_back(b.begin, b.end);
    std::sort(bounds.begin(), bounds.end());
    for (const Bucket& b : buckets)
      segment_of_bucket_.push_back(static_cast<std::size_t>(
          std::lower_bound(bounds.begin(), bounds.end(), std::make_pair(b.begin, b.end)) - bounds.begin()));
  } else if (n > 0) {
    bounds.emplace_back(0, n);
  }
  segments_.clear();
  std::int64_t block = 0;
  for (const auto& [begin, end] : bounds) {
    Segment seg;
    seg.begin = begin;
    seg.end = end;
    seg.part = (end - begin) / p;
    seg.tail = end - begin - p * seg.part;
    seg.offset = block;
    block += seg.part + (seg.tail > 0 ? 1 : 0);
    segments_.push_back(seg);
  }
  // Every rank's shard must hold something (an empty one would hold no state to tell apart from
  // none); each rank computes every rank's, so all refuse together.
  for (std::int64_t q = 0; q < p; ++q) {
    std::int64_t mine = 0;
    for (const Segment& seg : segments_) seg.for_each_piece(q, [&](std::int64_t, std::int64_t len, std::int64_t) { mine += len; });
    DPL_CHECK(mine > 0, who, ": the model's ", n, " parameter elements",
              zero_stage_ == 2 ? detail::concat(" in ", segments_.size(), " bucket(s)") : std::string(),
              " leave rank ", q, " of ", p, " no element of its own; shard larger models",
              zero_stage_ == 2 ? ", use larger buckets or stage 1" : "", ", or leave the state unsharded");
  }
  shard_ranges_.clear();
  shard_numel_ = 0;
  for (const Segment& seg : segments_)
    seg.for_each_piece(r, [&](std::int64_t lo, std::int64_t len, std::int64_t) {
      // Pieces that touch (of neighbouring segments) are one range.
      if (!shard_ranges_.empty() && shard_ranges_.back().begin + shard_ranges_.back().numel == lo)
        shard_ranges_.back().numel += len;
      else
        shard_ranges_.push_back({lo, len});
      shard_numel_ += len;
    });
  shard_block_ = block;
  if (p > 1) {
    // Zeros, so that the padding past each tail adds nothing odd.
    const TensorOptions f32(kFloat32, arena.device()), own(arena.dtype(), arena.device());
    const auto segments = static_cast<std::int64_t>(segments_.size());
    std::int64_t largest = 0;
    for (const Segment& seg : segments_) largest = std::max(largest, seg.part);
    scatter_recv_ = Tensor::zeros({block}, f32);
    scatter_tails_ = Tensor::zeros({p * segments}, f32);
    gather_tails_send_ = Tensor::zeros({segments}, own);
    gather_tails_ = Tensor::zeros({p * segments}, own);
    gather_recv_ = arena.device().is_cuda() ? Tensor::zeros({p * largest}, own) : Tensor();
  }
  // What a sharded gradient hook (clipping) combines each rank's part of a norm with.
  std::shared_ptr<comm::Communicator> comm = comm_;
  next().set_state_shard({shard_ranges_, Tensor(), Tensor(), [comm](Tensor& t) {
                            if (comm->size() > 1) comm->allreduce(t, comm::ReduceOp::kSum);
                          }});
  shard_arena_numel_ = n;
  shard_arena_id_ = arena.id();
}

// Each segment's reduce-scatter: its first p * part gradients straight from the arena (the
// reducer's slice of it), and its tail through its p elements of scatter_tails_.
BucketScatter DataParallelStage::segment_scatter(std::size_t k) const {
  const Segment& seg = segments_[k];
  BucketScatter t{scatter_recv_.narrow(0, seg.offset, seg.part), Tensor(), Tensor()};
  if (seg.tail > 0) {
    const std::int64_t p = comm_->size();
    t.tail_send = scatter_tails_.narrow(0, static_cast<std::int64_t>(k) * p, p);
    t.tail_recv = scatter_recv_.narrow(0, seg.offset + seg.part, 1);
  }
  return t;
}

std::vector<BucketScatter> DataParallelStage::bucket_scatters() const {
  std::vector<BucketScatter> out;
  for (const std::size_t k : segment_of_bucket_) out.push_back(segment_scatter(k));
  return out;
}

// The sharded step: each rank receives the mean of its shard of the gradients (reduce-scatters:
// the bytes of an allreduce's first half; stage 2's ran bucket by bucket during backward),
// updates the parameters of its shard with the state it holds for them, and the ranks then
// gather each other's updated shards (the allreduce's second half).
void DataParallelStage::reduce_scatter_and_step(bool overlapped) {
  std::vector<Tensor> buffers;
  bool checked = false;
  if (overlapped) {
    // As the overlapped allreduce: each bucket was checked on this rank before its reduce-scatter
    // (local_flag_), which the wrapped optimizer takes as its flag.
    checked = next().non_finite_policy() != optim::NonFinitePolicy::kOff;
    OverlapTimes times;
    {
      profile::ScopedPhase phase(timer_, "reduce_scatter", iteration_);
      times = reducer_->finish_backward();
      if (checked) buffers = next().adopt_prepared_gradients(local_flag_);
    }
    record_overlap(times, "reduce_scatter");
    if (!checked) buffers = prepare_gradients_timed();
    // Without the policy's check a float16 model still checks for overflow, on this rank's own
    // gradients: the flag is this rank's verdict too.
    if (buffers.size() > 1 && !checked) local_flag_on(buffers.back().device()).copy_(buffers.back());
    checked = buffers.size() > 1;
    if (checked && comm_->size() > 1) comm_->allreduce(buffers.back(), comm::ReduceOp::kMean);
  } else {
    if (reducer_->needs_broadcast()) broadcast_parameters();
    lay_out_shard();
    buffers = prepare_gradients_timed();
    checked = buffers.size() > 1;
    if (checked) local_flag_on(buffers.back().device()).copy_(buffers.back());
    sync_point();
    if (comm_->size() > 1) {
      profile::ScopedPhase phase(timer_, "reduce_scatter", iteration_);
      for (std::size_t i = 1; i < buffers.size(); ++i) {
        Tensor flag = buffers[i];
        comm_->allreduce(flag, comm::ReduceOp::kMean);
      }
      for (std::size_t k = 0; k < segments_.size(); ++k) {
        const Segment& seg = segments_[k];
        reduce_scatter_bucket(*comm_, buffers.front().narrow(0, seg.begin, seg.end - seg.begin), segment_scatter(k));
      }
      if (mode_ == profile::TimingMode::kSynchronized) synchronize(target().device());
    }
  }
  deliver_shard_gradients(buffers.front());
  // The same averaged flag on every rank: all stop here together, or none does. (The gradients
  // outside a rank's shard are its own, not averaged: the parameter a rank names is the first
  // non-finite one it sees.)
  if (checked && next().stops_on_non_finite() && !next().gradients_finite()) stop_on_every_rank(buffers.front());
  step();
}

// This rank's parts of the averaged gradients, to where the pipeline reads them: the arena's
// own gradients at their places, or the pipeline's shard buffer (MixedPrecision's float32 master
// gradients of the shard), one part after the other. With one rank the "average" is grads itself.
void DataParallelStage::deliver_shard_gradients(const Tensor& grads) {
  const Tensor into = next().shard_gradients();
  const std::int64_t r = comm_->rank();
  const bool alone = comm_->size() == 1;
  if (alone && !into.defined()) return;
  std::int64_t at = 0;
  for (const Segment& seg : segments_)
    seg.for_each_piece(r, [&](std::int64_t lo, std::int64_t len, std::int64_t in_block) {
      const Tensor mean = alone ? grads.narrow(0, lo, len) : scatter_recv_.narrow(0, in_block, len);
      if (into.defined()) into.narrow(0, at, len).copy_(mean);
      else grads.narrow(0, lo, len).copy_(mean);
      at += len;
    });
}

void DataParallelStage::gather_parameters() {
  if (comm_->size() == 1) return;
  profile::ScopedPhase phase(timer_, "allgather", iteration_);
  Tensor params = target().arena().params();  // a handle on the arena's storage
  const std::int64_t p = comm_->size(), r = comm_->rank();
  for (std::size_t k = 0; k < segments_.size(); ++k) {
    const Segment& seg = segments_[k];
    if (seg.part > 0) {
      // The ranks' parts are the segment's first p * part elements in rank order: in place where
      // the communicator allows it, else through gather_recv_ (device buffers).
      Tensor all = params.narrow(0, seg.begin, p * seg.part);
      const Tensor mine = all.narrow(0, r * seg.part, seg.part);
      if (gather_recv_.defined()) {
        Tensor recv = gather_recv_.narrow(0, 0, p * seg.part);
        comm_->allgather(mine, recv);
        all.copy_(recv);
      } else {
        comm_->allgather(mine, all);
      }
    }
    if (seg.tail > 0) {
      const auto at = static_cast<std::int64_t>(k);
      Tensor send = gather_tails_send_.narrow(0, at, 1), recv = gather_tails_.narrow(0, at * p, p);
      if (r < seg.tail) send.copy_(params.narrow(0, seg.end - seg.tail + r, 1));
      comm_->allgather(send, recv);
      params.narrow(0, seg.end - seg.tail, seg.tail).copy_(recv.narrow(0, 0, seg.tail));
    }
  }
  if (mode_ == profile::TimingMode::kSynchronized) synchronize(target().device());
}

// Every rank's block (as allgathered: rank-major) back to the arena's layout.
void DataParallelStage::scatter_gathered(const Tensor& all, Tensor& into) const {
  for (std::int64_t q = 0; q < comm_->size(); ++q)
    for (const Segment& seg : segments_)
      seg.for_each_piece(q, [&](std::int64_t lo, std::int64_t len, std::int64_t in_block) {
        into.narrow(0, lo, len).copy_(all.narrow(0, q * shard_block_ + in_block, len));
      });
}

Tensor DataParallelStage::gathered(const Tensor& shard) const {
  const std::int64_t p = comm_->size(), r = comm_->rank();
  const TensorOptions o(shard.dtype(), shard.device());
  Tensor send = Tensor::zeros({shard_block_}, o), all = Tensor::empty({p * shard_block_}, o);
  std::int64_t at = 0;
  for (const Segment& seg : segments_)
    seg.for_each_piece(r, [&](std::int64_t, std::int64_t len, std::int64_t in_block) {
      send.narrow(0, in_block, len).copy_(shard.narrow(0, at, len));
      at += len;
    });
  comm_->allgather(send, all);
  // Zeros, as the arena's padding is.
  Tensor out = Tensor::zeros({shard_arena_numel_}, o);
  scatter_gathered(all, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> DataParallelStage::gathered_state() {
  std::vector<std::pair<std::string, Tensor>> out = next().gathered_state();
  if (zero_stage_ == 0 || shard_numel_ <= 0 || comm_->size() == 1) return out;
  // Every per-element state tensor of a sharded (elementwise) rule, and MixedPrecision's masters,
  // hold either one value per element of the shard or nothing (a setting's unused state): the
  // same choice on every rank.
  for (auto& [name, t] : out)
    if (t.numel() == shard_numel_) t = gathered(t);
  return out;
}

void DataParallelStage::set_overlap(const OverlapOptions& options) {
  DPL_CHECK(!(options.enabled && zero_stage_ == 1), "MultiNodeOptimizer.set_overlap: not with sharded optimizer state at ZeRO stage 1 (which ",
            "reduce-scatters after backward); stage 2 reduce-scatters bucket by bucket during backward ",
            "(set_zero_stage(2)), or turn sharding off first");
  if (reducer_) {
    reducer_->set_overlap(options);
    if (options.enabled)
      reducer_->check_overlap_supported("MultiNodeOptimizer.set_overlap", next().gradient_ranges().gradients.defined());
  }
  overlap_ = options;
  // Stage 2's segments are the buckets, which the options cut.
  if (zero_stage_ == 2) {
    shard_arena_numel_ = -1;
    if (model_ != nullptr) lay_out_shard();
  }
}

void DataParallelStage::record_overlap(const OverlapTimes& times, const std::string& phase) {
  for (std::size_t k = 0; k < times.buckets.size(); ++k) {
    const OverlapTimes::Interval& bucket = times.buckets[k];
    const std::string name = phase + "/bucket" + std::to_string(k);
    timer_.record(name, bucket.start, bucket.seconds, iteration_);
    // Durations only, as without overlap: laid end to end from the bucket's start.
    double sub_start = bucket.start;
    for (const auto& sub : bucket.phases) {
      timer_.record(name + "/" + sub.name, sub_start, sub.seconds, iteration_);
      sub_start += sub.seconds;
    }
  }
  timer_.record(phase + "/hidden", times.backward_end - times.hidden, times.hidden, iteration_);
  timer_.record(phase + "/total", times.backward_end, times.total, iteration_);
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
  if (zero_stage_ > 0) gather_parameters();
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
  if (zero_stage_ > 0) return reduce_scatter_and_step(overlapped);
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
    record_overlap(times, "allreduce");
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
        // A 16-bit model's float32 master gradients are filled bucket by bucket on the way;
        // ZeRO stage 2 reduce-scatters each bucket instead of allreducing it.
        if (zero_stage_ == 2) {
          lay_out_shard();
          reducer_->begin_backward(flag, next().gradient_ranges(), bucket_scatters());
        } else {
          reducer_->begin_backward(flag, next().gradient_ranges());
        }
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
  if (zero_stage_ > 0) return "a step with sharded optimizer state (ZeRO) cannot be recorded yet";
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
