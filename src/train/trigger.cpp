#include "dpl/train/trigger.hpp"

#include <utility>

#include "dpl/core/error.hpp"

namespace dpl::train {

Trigger Trigger::iterations(std::int64_t n) {
  DPL_CHECK(n >= 1, "Trigger::iterations: expected a period >= 1, got ", n);
  return {n, LengthUnit::kIteration, false};
}

Trigger Trigger::epochs(std::int64_t n) {
  DPL_CHECK(n >= 1, "Trigger::epochs: expected a period >= 1, got ", n);
  return {n, LengthUnit::kEpoch, false};
}

Trigger Trigger::end() { return {1, LengthUnit::kIteration, true}; }

Trigger Trigger::best(std::string key, Goal goal) {
  DPL_CHECK(!key.empty(), "Trigger::best: expected the key of a logged value, got an empty one");
  Trigger t{1, LengthUnit::kIteration, false};
  t.best_key = std::move(key);
  t.best_goal = goal;
  return t;
}

Trigger Trigger::and_at_end() const {
  Trigger t = *this;
  t.also_at_end = true;
  return t;
}

bool Trigger::fires(std::int64_t iteration, std::int64_t epoch, bool is_new_epoch) const {
  if (at_end || !best_key.empty()) return false;
  if (unit == LengthUnit::kIteration) return iteration % period == 0;
  return is_new_epoch && epoch % period == 0;
}

}  // namespace dpl::train
