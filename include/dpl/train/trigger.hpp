#pragma once
// When a trainer stops and when its extensions run: lengths and triggers counted in epochs or
// iterations, or decided by a logged value (the best so far, early stopping).

#include <cstdint>
#include <string>

namespace dpl::train {

/// What a training length or a trigger's period counts.
enum class LengthUnit { kEpoch, kIteration };

/// Whether a logged value is better when lower (a loss) or higher (an accuracy).
enum class Goal { kMinimize, kMaximize };

/// When an extension runs: every `period` iterations or epochs (after the update that completes
/// it), or once at the end of training, or when the training log gets a best value.
struct Trigger {
  std::int64_t period = 1;              ///< >= 1 for a periodic trigger
  LengthUnit unit = LengthUnit::kEpoch; ///< what period counts
  bool at_end = false;                  ///< true: only once, when training ends
  /// Also once at the end of training when the run's last update did not fire it, so that a run
  /// shorter than one period still evaluates and logs (the default of the Evaluator, LogReport
  /// and PrintReport).
  bool also_at_end = false;
  /// Not empty: a value trigger (best()); period and unit are not used.
  std::string best_key{};
  Goal best_goal = Goal::kMinimize;  ///< what "best" means for best_key

  /// Every n iterations. Requires n >= 1 (dpl::Error otherwise).
  static Trigger iterations(std::int64_t n);
  /// Every n epochs, on the iteration that completes the epoch. Requires n >= 1.
  static Trigger epochs(std::int64_t n);
  /// Once, after the last iteration.
  static Trigger end();
  /// Chainer's MinValueTrigger and MaxValueTrigger: fires in the iteration where the trainer's
  /// LogReport closes an entry whose `key` (e.g. "validation/main/loss") is better than in every
  /// earlier entry — the first entry always is. With extensions::SaveModel it keeps the best
  /// model. The decision is read from the log, which every rank keeps alike and checkpoints
  /// restore, so all ranks agree and a resumed run remembers the best so far. The Trainer refuses
  /// it (dpl::Error) without a LogReport, and when an entry lacks the key.
  /// Requires a non-empty key.
  static Trigger best(std::string key, Goal goal);
  /// This trigger, also fired once at the end of training when the last update did not fire it.
  Trigger and_at_end() const;
  /// Whether a periodic trigger fires after the update that left the iterator at iteration
  /// (batches served), epoch (epochs completed) and is_new_epoch. False for end() and best(),
  /// which the Trainer decides.
  bool fires(std::int64_t iteration, std::int64_t epoch, bool is_new_epoch) const;
};

}  // namespace dpl::train
