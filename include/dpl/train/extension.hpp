#pragma once
// What runs around a Trainer's updates: the base class of evaluators, logs, reports, snapshots,
// the learning-rate schedule and the phase summary (dpl/train/extensions/).

#include <string>

#include "dpl/train/trigger.hpp"

namespace dpl::train {

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
  /// Whether it writes files into trainer.out(): the trainer creates and probes that folder when
  /// run() starts only if one of its extensions does (see Trainer). An extension that writes
  /// elsewhere creates its folder itself.
  virtual bool writes_output(const Trainer& /*trainer*/) const { return false; }
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

}  // namespace dpl::train
