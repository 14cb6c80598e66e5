#pragma once
// Chainer's StandardUpdater: one training iteration from a batch source, a loss function and an
// optimizer.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dpl/autograd/variable.hpp"
#include "dpl/core/device.hpp"
#include "dpl/data/batch_iterator.hpp"
#include "dpl/data/global_batch_source.hpp"
#include "dpl/data/batch_source.hpp"
#include "dpl/optim/optimizer.hpp"
#include "dpl/parallel/multi_node_optimizer.hpp"
#include "dpl/train/captured_step.hpp"
#include "dpl/train/observation.hpp"

namespace dpl::train {

/// The loss of one batch. It gets the batch on the updater's device and the trainer's
/// Observation, where it may report more values (e.g. "main/accuracy"); the updater reports the
/// returned loss as "main/loss".
using LossFunction = std::function<Variable(const data::Batch& batch, Observation& observation)>;

/// Chainer's StandardUpdater: each update() takes the iterator's next batch, moves it to the
/// device and runs optimizer.update with the loss function (so under a MultiNodeOptimizer the
/// gradients are averaged over the ranks and every phase is timed). The iterator is any
/// data::BatchSource: a data::BatchIterator over a data set in memory, or a
/// data::ImageBatchSource over JPEG files.
class StandardUpdater {
 public:
  /// Requires: iterator and optimizer outlive the updater; optimizer set up on the model the loss
  /// function uses, which lives on device; a callable loss function (dpl::Error otherwise).
  ///
  /// The static types of the arguments decide what the updater knows of them beyond training,
  /// without asking at run time: a data::BatchIterator (or a class derived from it) is a position
  /// that Trainer::save and Trainer::resume can hold (batch_iterator()), and so is a
  /// data::GlobalBatchSource (global_source()), which resumes on another number of processes; a
  /// parallel::MultiNodeOptimizer (or derived) gets the "data" phase and the whole iteration
  /// recorded in its timer(), and lends its timer, communicator and summary to the Trainer and to
  /// extensions::PhaseSummary (multi_node_optimizer()). Passed as a plain data::BatchSource& or
  /// optim::Optimizer&, they train the same but are not used in those ways.
  template <typename Source, typename Opt,
            typename = std::enable_if_t<std::is_base_of_v<data::BatchSource, Source> &&
                                        std::is_base_of_v<optim::Optimizer, Opt>>>
  StandardUpdater(Source& iterator, Opt& optimizer, LossFunction loss, Device device = Device::cpu())
      : StandardUpdater(iterator, checkpointable(iterator), global(iterator), optimizer, multi_node(optimizer),
                        std::move(loss), device) {}

  /// One iteration (of micro_batches() batches). The wait for the batches (the source's next()
  /// and the copies to the device) is timed as the "data" phase; given a
  /// parallel::MultiNodeOptimizer it is recorded into the optimizer's timer() before the update's
  /// own phases, so traces and the phase summary show it.
  /// Ensures: iterator().iteration() grew by micro_batches() and "main/loss" was observed;
  /// under optim::NonFinitePolicy::kSkip also "main/skipped_steps" (1 for a skipped step, else 0:
  /// a log row's mean is the fraction of its steps that were skipped). Under kStop a non-finite
  /// step throws the optimizer's dpl::Error out of here (and out of Trainer::run).
  /// On a GPU it waits for the iteration's work, so update_seconds() measures it.
  void update(Observation& observation);

  /// The source the batches come from.
  data::BatchSource& iterator() const { return iterator_; }
  /// The optimizer each update runs (a MultiNodeOptimizer in data-parallel training).
  optim::Optimizer& optimizer() const { return optimizer_; }
  /// The source as a data::BatchIterator when it was given as one, else nullptr.
  data::BatchIterator* batch_iterator() const { return batch_iterator_; }
  /// The source as a data::GlobalBatchSource when it was given as one, else nullptr.
  data::GlobalBatchSource* global_source() const { return global_source_; }
  /// The optimizer as a parallel::MultiNodeOptimizer when it was given as one, else nullptr.
  parallel::MultiNodeOptimizer* multi_node_optimizer() const { return multi_node_; }
  /// The device batches are moved to.
  Device device() const { return device_; }
  /// Updates run by this object, and the seconds they took (evaluation and reports excluded).
  std::int64_t updates() const { return updates_; }
  double update_seconds() const { return update_seconds_; }
  /// Of updates(), those whose step the optimizer skipped for non-finite gradients
  /// (optim::NonFinitePolicy::kSkip).
  std::int64_t skipped_updates() const { return skipped_updates_; }
  /// Of update_seconds(), the seconds spent waiting for batches (the "data" phase).
  double data_seconds() const { return data_seconds_; }

  /// Gradient accumulation: each update() draws micro_batches batches and takes one optimizer
  /// step from them, with the gradients of their mean loss (optim::Optimizer::update with micro-
  /// batches: under a MultiNodeOptimizer one allreduce per step, after the last backward). The
  /// loss function runs once per micro-batch; "main/loss" is the mean of the micro-batches'
  /// losses. Default 1. Requires micro_batches >= 1, and 1 with graph capture (dpl::Error).
  void set_micro_batches(int micro_batches);
  /// Batches per update() (set_micro_batches).
  int micro_batches() const { return micro_batches_; }

  /// Records the training step as a CUDA graph after warmup_steps ordinary ones and replays it
  /// from then on (train::CapturedStep, docs/cuda-graphs.md; off by default). The loss function
  /// then runs for the warm-up, for the recording and for batches of another shape (a last,
  /// shorter batch), which run unrecorded; what it observes as tensors is observed again after
  /// every replay, with the replay's values, and it may not observe host numbers. Requires a CUDA
  /// device and an optimizer whose replay_refusal() is empty (dpl::Error here otherwise, saying
  /// why); the optimizer must be set up.
  void set_graph_capture(bool on, int warmup_steps = 3);
  /// Whether steps are recorded, and the step object that records them (null when off).
  bool graph_capture() const { return captured_ != nullptr; }
  const CapturedStep* captured_step() const { return captured_.get(); }

 private:
  StandardUpdater(data::BatchSource& iterator, data::BatchIterator* batch_iterator,
                  data::GlobalBatchSource* global_source, optim::Optimizer& optimizer,
                  parallel::MultiNodeOptimizer* multi_node, LossFunction loss, Device device);
  // What the template constructor knows of its arguments' static types.
  static data::BatchIterator* checkpointable(data::BatchIterator& iterator) { return &iterator; }
  static data::BatchIterator* checkpointable(data::BatchSource& /*source*/) { return nullptr; }
  static data::GlobalBatchSource* global(data::GlobalBatchSource& source) { return &source; }
  static data::GlobalBatchSource* global(data::BatchSource& /*source*/) { return nullptr; }
  static parallel::MultiNodeOptimizer* multi_node(parallel::MultiNodeOptimizer& optimizer) { return &optimizer; }
  static parallel::MultiNodeOptimizer* multi_node(optim::Optimizer& /*optimizer*/) { return nullptr; }

  data::BatchSource& iterator_;
  data::BatchIterator* batch_iterator_;     // &iterator_ when given as a BatchIterator
  data::GlobalBatchSource* global_source_;  // &iterator_ when given as a GlobalBatchSource
  optim::Optimizer& optimizer_;
  parallel::MultiNodeOptimizer* multi_node_;  // &optimizer_ when given as a MultiNodeOptimizer
  LossFunction loss_;
  Device device_;
  std::unique_ptr<CapturedStep> captured_;
  Observation* observation_ = nullptr;                         // the current update's, for the step's loss function
  std::vector<std::pair<std::string, Tensor>> recorded_values_;  // what the recorded step observes
  int micro_batches_ = 1;
  // The current update's batches on the device: kept between updates only for its capacity
  // (emptied after each, so that the source may reuse its buffers), so a steady loop allocates
  // no vector.
  std::vector<data::Batch> batches_;
  std::int64_t updates_ = 0;
  std::int64_t skipped_updates_ = 0;
  double update_seconds_ = 0.0;
  double data_seconds_ = 0.0;
};

}  // namespace dpl::train
