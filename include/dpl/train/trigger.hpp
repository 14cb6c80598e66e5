#pragma once
// When a trainer stops and when its extensions run: lengths and triggers counted in epochs or
// iterations.

#include <cstdint>

namespace dpl::train {

/// What a training length or a trigger's period counts.
enum class LengthUnit { kEpoch, kIteration };

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

}  // namespace dpl::train
