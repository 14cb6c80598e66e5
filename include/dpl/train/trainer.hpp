#pragma once
// Chainer's Trainer: an updater runs the training iterations and extensions (evaluation, logs,
// reports, snapshots, the learning-rate schedule, the phase summary) run on triggers around it,
// so a program is its model, its data and a few lines of setup. Including this header gives the
// whole of it: the trigger, the observation, the updater, the extensions and what they use.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpl/comm/communicator.hpp"
#include "dpl/core/random.hpp"
#include "dpl/data/dataset.hpp"
#include "dpl/optim/schedule.hpp"
#include "dpl/train/checkpoint.hpp"
#include "dpl/train/extension.hpp"
#include "dpl/train/extensions/evaluator.hpp"
#include "dpl/train/extensions/log_report.hpp"
#include "dpl/train/extensions/lr_scheduler.hpp"
#include "dpl/train/extensions/phase_summary.hpp"
#include "dpl/train/extensions/print_report.hpp"
#include "dpl/train/extensions/progress_bar.hpp"
#include "dpl/train/extensions/save_model.hpp"
#include "dpl/train/extensions/snapshot.hpp"
#include "dpl/train/observation.hpp"
#include "dpl/train/progress_display.hpp"
#include "dpl/train/report_table.hpp"
#include "dpl/train/standard_updater.hpp"
#include "dpl/train/training_log.hpp"
#include "dpl/train/trigger.hpp"

namespace dpl::train {

/// Creates folder (and its parents) if needed and checks that files can be written in it, with a
/// probe file that is removed again; the Trainer does this for its output folder when one of its
/// extensions writes there. A program can call it first thing, before loading data. Throws
/// dpl::Error naming the folder and the system's reason (an empty path, a file in the way, no
/// permission, a read-only file system).
void prepare_output_folder(const std::string& folder);

/// How a Trainer runs, in libtorch's style:
///
///     Trainer trainer(updater, TrainerOptions(20, LengthUnit::kEpoch).communicator(comm).out("result"));
///
/// Defaults: one epoch, one process (no communicator), out "result" (Chainer's).
class TrainerOptions {
 public:
  /// Trains for length epochs or iterations (unit). The Trainer requires length >= 1.
  explicit TrainerOptions(std::int64_t length = 1, LengthUnit unit = LengthUnit::kEpoch)
      : length_(length), unit_(unit) {}

  /// Stops after length epochs or iterations (Chainer's stop trigger).
  TrainerOptions& stop(std::int64_t length, LengthUnit unit) {
    length_ = length;
    unit_ = unit;
    return *this;
  }
  /// The job's communicator, shared with the trainer (nullptr: one process).
  TrainerOptions& communicator(std::shared_ptr<comm::Communicator> comm) {
    comm_ = std::move(comm);
    return *this;
  }
  /// The folder for logs, summaries and (by default) snapshots; empty: no files (logs in memory).
  TrainerOptions& out(std::string folder) {
    out_ = std::move(folder);
    return *this;
  }
  /// Chainer's EarlyStoppingTrigger: also stops, before the length is reached, once `patience`
  /// consecutive LogReport entries bring no value of key better than the best before them
  /// (e.g. stop_early("validation/main/loss", Goal::kMinimize, 3)). Decided from the log, which
  /// every rank keeps alike, so all ranks stop together. The Trainer requires a LogReport and
  /// patience >= 1 (dpl::Error from run() otherwise).
  TrainerOptions& stop_early(std::string key, Goal goal, std::int64_t patience) {
    stop_key_ = std::move(key);
    stop_goal_ = goal;
    patience_ = patience;
    return *this;
  }

  /// The training length, in unit()s.
  std::int64_t length() const { return length_; }
  /// What length() counts.
  LengthUnit unit() const { return unit_; }
  /// The communicator given, or nullptr.
  const std::shared_ptr<comm::Communicator>& communicator() const { return comm_; }
  /// The output folder given.
  const std::string& out() const { return out_; }
  /// The largest share of a run()'s steps that may be skipped for non-finite gradients
  /// (optim::NonFinitePolicy::kSkip) before the run counts as failed: run() then ends, after its
  /// end extensions and finalize() (so logs and snapshots are written), with a dpl::Error giving
  /// the count. Default 0.5: a run that skipped more than half its steps did not train. 1 never
  /// fails. Requires share in [0, 1] (dpl::Error from the Trainer otherwise).
  TrainerOptions& max_skipped_share(double share) {
    max_skipped_share_ = share;
    return *this;
  }
  /// The share set by max_skipped_share().
  double max_skipped_share() const { return max_skipped_share_; }
  /// The key early stopping watches; empty when stop_early() was not called.
  const std::string& stop_key() const { return stop_key_; }
  /// Whether a lower or a higher stop_key() value is better.
  Goal stop_goal() const { return stop_goal_; }
  /// How many entries without improvement stop training.
  std::int64_t patience() const { return patience_; }

 private:
  std::int64_t length_;
  LengthUnit unit_;
  std::shared_ptr<comm::Communicator> comm_;
  std::string out_ = "result";
  std::string stop_key_;
  Goal stop_goal_ = Goal::kMinimize;
  std::int64_t patience_ = 0;
  double max_skipped_share_ = 0.5;
};

/// Chainer's Trainer: runs the updater until the training length is reached, and the extensions
/// on their triggers. Every rank runs the same trainer with the same extensions (extensions that
/// print or write files do so on rank 0 only; evaluation and snapshots are collective).
///
/// Files: a trainer creates nothing it does not write into. Its out() folder is created (with its
/// parents) and probed with a test file when run() starts, on every rank, and only if one of its
/// extensions writes there (Extension::writes_output: extensions::LogReport,
/// extensions::Snapshot without a folder of its own, extensions::PhaseSummary given a
/// parallel::MultiNodeOptimizer), so that a folder that cannot be written fails before the first
/// update, not after the first epoch. A trainer whose extensions write nothing creates no folder,
/// and an empty out() writes no logs or summaries at all.
class Trainer {
 public:
  /// Trains as options say. Requires options.length() >= 1 (dpl::Error otherwise); updater
  /// outlives the trainer. Creates no file or folder.
  explicit Trainer(StandardUpdater& updater, TrainerOptions options = TrainerOptions());
  /// The same as Trainer(updater, TrainerOptions(length, unit).communicator(comm).out(out)).
  Trainer(StandardUpdater& updater, std::int64_t length, LengthUnit unit,
          std::shared_ptr<comm::Communicator> comm = nullptr, std::string out = "result");

  /// Adds an extension with its default trigger or the given one. Requires a non-null extension
  /// whose name no other extension of this trainer has (dpl::Error otherwise).
  void extend(std::shared_ptr<Extension> extension);
  void extend(std::shared_ptr<Extension> extension, Trigger trigger);

  /// Adds a generator whose state checkpoints keep, per rank, under name (the iterator's and the
  /// process-wide default generator are always kept). Requires gen to outlive the trainer.
  void add_generator(const std::string& name, Generator& gen);

  /// Prepares the output folder if an extension writes there (see the class comment; throws
  /// dpl::Error naming the folder and the system's reason), runs every initialize(), then the
  /// loop until the length is reached: before_update hooks, update, triggered extensions; then
  /// end() extensions and every finalize(). Then throws dpl::Error when more than
  /// TrainerOptions::max_skipped_share() of this call's steps were skipped. Returns at once when a resumed run had already
  /// reached the length (after the end extensions and finalize).
  /// With a communicator of several ranks, first checks that every rank runs the same length
  /// (and, for a length in epochs, the same number of batches per epoch): ranks that would run
  /// different numbers of steps throw the same dpl::Error naming the setting and each rank's
  /// value, instead of waiting for each other at the end (comm::check_settings_agree).
  void run();

  /// Collective: writes a checkpoint of the model, optimizer, data position, generators, log and
  /// observations to path (see save_checkpoint). Requires the updater to have been given a
  /// data::BatchIterator or a data::GlobalBatchSource, the sources whose position a checkpoint
  /// can hold (dpl::Error otherwise, before anything is written).
  void save(const std::string& path);
  /// Collective: restores what save() wrote, so run() continues bit-identically on as many
  /// processes as saved it (see load_checkpoint), then tells every extension. A run drawing from
  /// a data::GlobalBatchSource may resume on another number of processes with the same global
  /// batch: generators are then re-seeded and each rank's pending observations are the saved
  /// ranks' average (docs/training-state.md says what stays exact). Call after extend(), before
  /// run(). Requires a source as save() does.
  void resume(const std::string& path);

  /// The extension of that name, or nullptr.
  Extension* find(const std::string& name) const;
  /// The extension of type E (or derived from it), or nullptr.
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
  const std::shared_ptr<comm::Communicator>& communicator() const { return comm_; }
  /// True on rank 0 (and in a process without a communicator): where output goes.
  bool is_root() const { return comm_ == nullptr || comm_->rank() == 0; }
  /// The folder for logs, summaries and (by default) snapshots; empty keeps logs in memory.
  const std::string& out() const { return out_; }
  /// The training length, in unit()s.
  std::int64_t length() const { return length_; }
  /// What length() counts.
  LengthUnit unit() const { return unit_; }
  /// Whether the length has been reached, or early stopping (TrainerOptions::stop_early) stopped
  /// the run.
  bool done() const;
  /// Whether early stopping ended the run before its length.
  bool stopped_early() const;
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
    std::int64_t last_fired = -1;  // the iteration it last ran at; -1: not in this run()
  };
  // Whether e runs after the latest update, or (at_end) once training has ended; `updated`: this
  // run() made at least one update.
  bool fires(const Entry& e, bool at_end, bool updated) const;
  // For value triggers and early stopping: the LogReport's log, or a dpl::Error naming `who`.
  const TrainingLog& value_log(const std::string& who) const;

  StandardUpdater& updater_;
  std::int64_t length_;
  LengthUnit unit_;
  std::shared_ptr<comm::Communicator> comm_;
  std::string out_;
  std::string stop_key_;
  Goal stop_goal_;
  std::int64_t patience_;
  double max_skipped_share_;
  Observation observation_;
  std::vector<Entry> extensions_;  // sorted by priority, then order of extend()
  std::vector<std::pair<std::string, Generator*>> generators_;
  std::string run_id_ = new_run_id();
};

}  // namespace dpl::train
