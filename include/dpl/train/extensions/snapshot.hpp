#pragma once
// Snapshots: a trainer's checkpoints written on a trigger, the newest few kept.

#include <cstdint>
#include <string>

#include "dpl/train/extension.hpp"

namespace dpl::train::extensions {

/// Writes a checkpoint (Trainer::save) to <folder>/snapshot_iter_<iteration>.safetensors and then
/// keeps only the newest `keep` there, deleting older ones once the new one is complete.
/// Default trigger: every epoch. Collective.
class Snapshot : public Extension {
 public:
  /// folder empty: the trainer's out folder. Requires keep >= 1 (dpl::Error otherwise).
  explicit Snapshot(std::string folder = "", std::int64_t keep = 1);
  std::string name() const override { return "Snapshot"; }
  int priority() const override { return kPrioritySnapshot; }
  /// True when it has no folder of its own: it writes into trainer.out().
  bool writes_output(const Trainer& /*trainer*/) const override { return folder_.empty(); }
  void operator()(Trainer& trainer) override;

 private:
  std::string folder_;
  std::int64_t keep_;
};

}  // namespace dpl::train::extensions
