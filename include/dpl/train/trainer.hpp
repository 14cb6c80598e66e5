#pragma once
// Chainer's Trainer: an updater runs the training iterations and extensions (evaluation, logs,
// reports, snapshots, the learning-rate schedule, the phase summary) run on triggers around it,
// so a program is its model, its data and a few lines of setup.

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dpl/comm/communicator.hpp"
#include "dpl/core/device.hpp"
#include "dpl/core/random.hpp"
#include "dpl/data/batch_iterator.hpp"
#include "dpl/data/batch_source.hpp"
#include "dpl/data/dataset.hpp"
#include "dpl/optim/optimizer.hpp"
#include "dpl/optim/schedule.hpp"
#include "dpl/train/captured_step.hpp"
#include "dpl/train/checkpoint.hpp"
#include "dpl/train/log_report.hpp"
#include "dpl/train/print_report.hpp"
#include "dpl/train/progress_bar.hpp"

namespace dpl::train {

/// When an extension runs: every `period` iterations or epochs (after the update that completes
/// it), or once at the end of training.
struct Trigger {
  std::int64_t period = 1;              ///< >= 1 for a periodic trigger
  LengthUnit unit = LengthUnit::kEpoch; ///< what period counts
  bool at_end = false;                  ///< true: only once, when training ends

  /// Every n iterations. Requires n >= 1 (dpl::Error otherwise).
  static Trigger iterations(std::int64_t n);
  /// Every n epochs, on the iteration that completes the epoch. Requires n >= 1.
  static Trigger epochs(std::int64_t n);
  /// Once, after the last iteration.
  static Trigger end();
  /// Whether a periodic trigger fires after the update that left the iterator at iteration
  /// (batches served), epoch (epochs completed) and is_new_epoch. False for end().
  bool fires(std::int64_t iteration, std::int64_t epoch, bool is_new_epoch) const;
};

/// The values observed during training, summed until a LogReport takes their means. Tensor
/// observations are summed on their own device, so an iteration never waits for a GPU to report
/// its loss; numbers are summed on the host. Keys keep the order they were first seen in.
class Observation {
 public:
  /// Adds a one-element float tensor (a loss, an accuracy; float32, or bfloat16/float16 under
  /// mixed precision, summed in float32) to key's sum, on its device.
  void observe(const std::string& key, const Tensor& value);
  /// Adds a number to key's sum.
  void observe(const std::string& key, double value);
  /// Gives key its place in the order without a value yet (so "main/loss" comes first).
  void reserve(const std::string& key);
  /// The mean of every key observed since the last take(), in order (keys with no value left
  /// out), and starts afresh. Reads device sums back: one wait for the device per call.
  std::vector<std::pair<std::string, double>> take_means();
  /// The sums not yet taken, as JSON text (exact: float32 sums convert to double exactly).
  std::string to_json() const;
  /// Restores sums saved by to_json, putting tensor sums on device. Throws dpl::Error for text
  /// that is not what to_json writes.
  void restore_json(const std::string& text, Device device);
  /// While into is not null, observe(key, tensor) appends (key, tensor) to *into instead of
  /// adding the value up, and observe(key, number) throws dpl::Error. A recorded training step
  /// (StandardUpdater::set_graph_capture) uses it: the tensors are the recording's own buffers,
  /// observed anew after each replay, and a host number would be frozen at the recording.
  void record_into(std::vector<std::pair<std::string, Tensor>>* into) { recording_ = into; }

 private:
  struct Sum {
    std::string key;
    Tensor device_sum;  // float32, one element; undefined when only numbers were observed
    double host_sum = 0.0;
    std::int64_t count = 0;
  };
  Sum& slot(const std::string& key);
  std::vector<Sum> sums_;
  std::vector<std::pair<std::string, Tensor>>* recording_ = nullptr;
};

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
  StandardUpdater(data::BatchSource& iterator, optim::Optimizer& optimizer, LossFunction loss,
                  Device device = Device::cpu());

  /// One iteration. The wait for the batch (the source's next() and the copy to the device) is
  /// timed as the "data" phase; under a parallel::MultiNodeOptimizer it is recorded into the
  /// optimizer's timer() before the update's own phases, so traces and the phase summary show it.
  /// Ensures: iterator().iteration() grew by one and "main/loss" was observed;
  /// under optim::NonFinitePolicy::kSkip also "main/skipped_steps" (1 for a skipped step, else 0:
  /// a log row's mean is the fraction of its steps that were skipped). Under kStop a non-finite
  /// step throws the optimizer's dpl::Error out of here (and out of Trainer::run).
  /// On a GPU it waits for the iteration's work, so update_seconds() measures it.
  void update(Observation& observation);

  /// The source the batches come from.
  data::BatchSource& iterator() const { return iterator_; }
  /// The optimizer each update runs (a MultiNodeOptimizer in data-parallel training).
  optim::Optimizer& optimizer() const { return optimizer_; }
  /// The device batches are moved to.
  Device device() const { return device_; }
  /// Updates run by this object, and the seconds they took (evaluation and reports excluded).
  std::int64_t updates() const { return updates_; }
  double update_seconds() const { return update_seconds_; }
  /// Of update_seconds(), the seconds spent waiting for batches (the "data" phase).
  double data_seconds() const { return data_seconds_; }

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
  data::BatchSource& iterator_;
  optim::Optimizer& optimizer_;
  LossFunction loss_;
  Device device_;
  std::unique_ptr<CapturedStep> captured_;
  Observation* observation_ = nullptr;                         // the current update's, for the step's loss function
  std::vector<std::pair<std::string, Tensor>> recorded_values_;  // what the recorded step observes
  std::int64_t updates_ = 0;
  double update_seconds_ = 0.0;
  double data_seconds_ = 0.0;
};

class Trainer;

/// Something that runs around the updates. Subclasses override what they need.
class Extension {
 public:
  /// Order among extensions firing at the same iteration: higher first, then the order of extend().
  static constexpr int kPriorityWriter = 300;  ///< produce values (evaluators, logs)
  static constexpr int kPriorityEditor = 200;  ///< change values
  static constexpr int kPriorityReader = 100;  ///< read them (reports)
  static constexpr int kPrioritySnapshot = -100;  ///< after everything else of the iteration

  virtual ~Extension() = default;
  /// The name find() looks for (one of each name per trainer).
  virtual std::string name() const = 0;
  /// The trigger used when extend() is given none.
  virtual Trigger default_trigger() const { return Trigger::epochs(1); }
  /// Where it runs among the extensions of one iteration (the kPriority* constants).
  virtual int priority() const { return kPriorityReader; }
  /// Runs once when run() starts, before the first update (after any resume).
  virtual void initialize(Trainer& /*trainer*/) {}
  /// Runs when the trigger fires, after that iteration's update.
  virtual void operator()(Trainer& /*trainer*/) {}
  /// Runs before every update (the learning-rate schedule sets the rate here).
  virtual void before_update(Trainer& /*trainer*/) {}
  /// Runs after Trainer::resume has restored a checkpoint.
  virtual void resumed(Trainer& /*trainer*/) {}
  /// Runs once when training ends, after the end() triggers, also on every rank.
  virtual void finalize(Trainer& /*trainer*/) {}
};

/// Chainer's Trainer: runs the updater until the training length is reached, and the extensions
/// on their triggers. Every rank runs the same trainer with the same extensions (extensions that
/// print or write files do so on rank 0 only; evaluation and snapshots are collective).
/// Creates folder (and its parents) if needed and checks that files can be written in it, with a
/// probe file that is removed again; the Trainer does this for its output folder. A program can
/// call it first thing, before loading data. Throws dpl::Error naming the folder and the system's
/// reason (an empty path, a file in the way, no permission, a read-only file system).
void prepare_output_folder(const std::string& folder);

class Trainer {
 public:
  /// Trains for length epochs or iterations (unit). comm is the job's communicator (nullptr: one
  /// process); out is the folder for logs and summaries, created here and probed with a test
  /// file so that a folder that cannot be written fails now, not after the first epoch (an empty
  /// out: no files). Requires length >= 1; updater and comm outlive the trainer. Throws
  /// dpl::Error naming the folder and the system's reason.
  Trainer(StandardUpdater& updater, std::int64_t length, LengthUnit unit, comm::Communicator* comm = nullptr,
          std::string out = "result");

  /// Adds an extension with its default trigger or the given one. Requires a non-null extension
  /// whose name no other extension of this trainer has (dpl::Error otherwise).
  void extend(std::shared_ptr<Extension> extension);
  void extend(std::shared_ptr<Extension> extension, Trigger trigger);

  /// Adds a generator whose state checkpoints keep, per rank, under name (the iterator's and the
  /// process-wide default generator are always kept). Requires gen to outlive the trainer.
  void add_generator(const std::string& name, Generator& gen);

  /// Runs every initialize(), then the loop until the length is reached: before_update hooks,
  /// update, triggered extensions; then end() extensions and every finalize(). Returns at once when a resumed run
  /// had already reached the length (after the end extensions and finalize).
  /// With a communicator of several ranks, first checks that every rank runs the same length
  /// (and, for a length in epochs, the same number of batches per epoch): ranks that would run
  /// different numbers of steps throw the same dpl::Error naming the setting and each rank's
  /// value, instead of waiting for each other at the end (comm::check_settings_agree).
  void run();

  /// Collective: writes a checkpoint of the model, optimizer, iterator, generators, log and
  /// observations to path (see save_checkpoint). Requires the updater's source to be a
  /// data::BatchIterator, the only source whose position a checkpoint can hold (dpl::Error
  /// otherwise, before anything is written).
  void save(const std::string& path);
  /// Collective: restores what save() wrote, so run() continues bit-identically (see
  /// load_checkpoint), then tells every extension. Call after extend(), before run(). Requires a
  /// data::BatchIterator source, as save() does.
  void resume(const std::string& path);

  /// The extension of that name, or nullptr.
  Extension* find(const std::string& name) const;
  /// The extension of type E, or nullptr.
  template <typename E>
  E* find() const {
    for (const auto& e : extensions_)
      if (auto* p = dynamic_cast<E*>(e.extension.get())) return p;
    return nullptr;
  }

  /// The updater given at construction.
  StandardUpdater& updater() const { return updater_; }
  /// The observations summed since the last LogReport.
  Observation& observation() { return observation_; }
  /// The job's communicator (nullptr for one process).
  comm::Communicator* communicator() const { return comm_; }
  /// True on rank 0 (and in a process without a communicator): where output goes.
  bool is_root() const { return comm_ == nullptr || comm_->rank() == 0; }
  /// The folder for logs, summaries and (by default) snapshots; empty keeps logs in memory.
  const std::string& out() const { return out_; }
  /// The training length, in unit()s.
  std::int64_t length() const { return length_; }
  /// What length() counts.
  LengthUnit unit() const { return unit_; }
  /// Whether the length has been reached.
  bool done() const;
  /// This run's id (new_run_id()), written into its checkpoints; resume() takes the checkpoint's.
  const std::string& run_id() const { return run_id_; }

 private:
  // What save() and resume() carry, except the observations; `who` names the caller in the
  // error for a source a checkpoint cannot hold.
  TrainingState training_state(const char* who);

  struct Entry {
    std::shared_ptr<Extension> extension;
    Trigger trigger;
    std::size_t order;
  };

  StandardUpdater& updater_;
  std::int64_t length_;
  LengthUnit unit_;
  comm::Communicator* comm_;
  std::string out_;
  Observation observation_;
  std::vector<Entry> extensions_;  // sorted by priority, then order of extend()
  std::vector<std::pair<std::string, Generator*>> generators_;
  std::string run_id_ = new_run_id();
};

namespace extensions {

/// Evaluates the model on a data set (train::evaluate, collective over the trainer's
/// communicator) and observes "<prefix>loss" and "<prefix>accuracy". Default trigger: every epoch.
class Evaluator : public Extension {
 public:
  /// Requires batch_size >= 1; dataset outlives the extension (it is held by value: cheap views).
  Evaluator(data::Dataset dataset, std::int64_t batch_size, std::string prefix = "validation/main/");
  /// Evaluates `batches` batches of source each time it runs: one epoch of a source that serves
  /// the same batches every epoch (an ImageBatchSource over an unshuffled validation shard).
  /// Requires a non-null source and batches >= 1 (dpl::Error otherwise).
  Evaluator(std::shared_ptr<data::BatchSource> source, std::int64_t batches, std::string prefix = "validation/main/");
  std::string name() const override { return "Evaluator"; }
  int priority() const override { return kPriorityWriter; }
  void operator()(Trainer& trainer) override;

 private:
  data::Dataset dataset_;
  std::shared_ptr<data::BatchSource> source_;  // set: evaluate batches_ of it instead of dataset_
  std::int64_t batch_size_ = 0;
  std::int64_t batches_ = 0;
  std::string prefix_;
};

/// Chainer's LogReport: at each trigger the means of the observations become an entry of the log
/// written to <out>/log on rank 0. Default trigger: every epoch.
class LogReport : public Extension {
 public:
  /// filename within the trainer's out folder.
  explicit LogReport(std::string filename = "log");
  std::string name() const override { return "LogReport"; }
  int priority() const override { return kPriorityWriter - 1; }  // after the evaluators
  /// Starts rank 0's log, so its elapsed_time counts from the start of training.
  void initialize(Trainer& trainer) override { log(trainer); }
  void operator()(Trainer& trainer) override;
  /// Rank 0's log (nullptr on the other ranks and before the first trigger or resume).
  train::LogReport* log() { return log_.get(); }
  /// Rank 0's log, created on first use on rank 0.
  train::LogReport* log(Trainer& trainer);

 private:
  std::string filename_;
  std::unique_ptr<train::LogReport> log_;
};

/// Chainer's PrintReport: prints the LogReport's new entries as a table on rank 0.
class PrintReport : public Extension {
 public:
  /// Requires out to outlive the extension; a LogReport extension in the trainer when it runs.
  explicit PrintReport(std::vector<std::string> entries = train::PrintReport::default_entries(),
                       std::ostream& out = std::cout);
  std::string name() const override { return "PrintReport"; }
  void operator()(Trainer& trainer) override;
  void resumed(Trainer& trainer) override;

 private:
  std::vector<std::string> entries_;
  std::ostream& out_;
  std::unique_ptr<train::PrintReport> report_;
  std::size_t printed_ = 0;
};

/// Chainer's ProgressBar on rank 0, over the trainer's length. Runs every iteration.
class ProgressBar : public Extension {
 public:
  /// Requires out to outlive the extension.
  explicit ProgressBar(ProgressBarOptions options = {}, std::ostream& out = std::cout);
  std::string name() const override { return "ProgressBar"; }
  Trigger default_trigger() const override { return Trigger::iterations(1); }
  void operator()(Trainer& trainer) override;
  void finalize(Trainer& trainer) override;

 private:
  ProgressBarOptions options_;
  std::ostream& out_;
  std::unique_ptr<train::ProgressBar> bar_;
};

/// Writes a checkpoint (Trainer::save) to <folder>/snapshot_iter_<iteration>.safetensors and then
/// keeps only the newest `keep` there, deleting older ones once the new one is complete.
/// Default trigger: every epoch. Collective.
class Snapshot : public Extension {
 public:
  /// folder empty: the trainer's out folder. Requires keep >= 1 (dpl::Error otherwise).
  explicit Snapshot(std::string folder = "", std::int64_t keep = 1);
  std::string name() const override { return "Snapshot"; }
  int priority() const override { return kPrioritySnapshot; }
  void operator()(Trainer& trainer) override;

 private:
  std::string folder_;
  std::int64_t keep_;
};

/// Sets the optimizer's learning rate from a schedule before every update (at the optimizer's
/// t(), so a resumed run continues the schedule where it stopped), and observes it as "lr".
class LrSchedule : public Extension {
 public:
  /// Requires a non-null schedule (dpl::Error otherwise).
  explicit LrSchedule(std::shared_ptr<const optim::LrSchedule> schedule);
  /// Copies any concrete schedule.
  template <typename S, typename = std::enable_if_t<std::is_base_of_v<optim::LrSchedule, S>>>
  explicit LrSchedule(const S& schedule) : LrSchedule(std::make_shared<const S>(schedule)) {}
  std::string name() const override { return "LrSchedule"; }
  Trigger default_trigger() const override { return Trigger::iterations(1); }
  void before_update(Trainer& trainer) override;

 private:
  std::shared_ptr<const optim::LrSchedule> schedule_;
};

/// At the end of training: the phase summary of a parallel::MultiNodeOptimizer across ranks
/// (collective), printed on rank 0 with the training throughput (and peak GPU memory on a GPU),
/// and written to <out>/phase_summary.json: profile::to_json's fields plus "communicator",
/// "nodes", "timing", "threads_per_process", "training_iterations", "training_seconds" and
/// "data_seconds" (rank 0's), what a scaling profile needs. With another optimizer, only the
/// throughput.
class PhaseSummary : public Extension {
 public:
  /// skip_warmup iterations are left out of the summary. Requires out to outlive the extension.
  explicit PhaseSummary(std::int64_t skip_warmup = 1, std::ostream& out = std::cout);
  std::string name() const override { return "PhaseSummary"; }
  Trigger default_trigger() const override { return Trigger::end(); }
  void operator()(Trainer& trainer) override;

 private:
  std::int64_t skip_warmup_;
  std::ostream& out_;
};

}  // namespace extensions
}  // namespace dpl::train
