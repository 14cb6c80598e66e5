#include "dpl/train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/atomic_file.hpp"
#include "dpl/comm/agreement.hpp"
#include "dpl/core/error.hpp"
#include "dpl/parallel/multi_node_optimizer.hpp"
#include "dpl/profile/phase_timer.hpp"

namespace dpl::train {

void prepare_output_folder(const std::string& folder) { detail::prepare_output_folder(folder, "output folder"); }

Trainer::Trainer(StandardUpdater& updater, TrainerOptions options)
    : updater_(updater),
      length_(options.length()),
      unit_(options.unit()),
      comm_(options.communicator()),
      out_(options.out()),
      stop_key_(options.stop_key()),
      stop_goal_(options.stop_goal()),
      patience_(options.patience()),
      max_skipped_share_(options.max_skipped_share()) {
  DPL_CHECK(max_skipped_share_ >= 0.0 && max_skipped_share_ <= 1.0,
            "Trainer: expected a max_skipped_share in [0, 1], got ", max_skipped_share_);
  DPL_CHECK(length_ >= 1, "Trainer: expected a training length >= 1, got ", length_);
  DPL_CHECK(stop_key_.empty() || patience_ >= 1, "Trainer: expected an early-stopping patience >= 1 (entries), got ",
            patience_);
  observation_.reserve("main/loss");  // the first column of the log, as in Chainer's
}

Trainer::Trainer(StandardUpdater& updater, std::int64_t length, LengthUnit unit,
                 std::shared_ptr<comm::Communicator> comm, std::string out)
    : Trainer(updater, TrainerOptions(length, unit).communicator(std::move(comm)).out(std::move(out))) {}

void Trainer::extend(std::shared_ptr<Extension> extension) {
  DPL_CHECK(extension != nullptr, "Trainer::extend: expected an extension, got null");
  const Trigger trigger = extension->default_trigger();
  extend(std::move(extension), trigger);
}

void Trainer::extend(std::shared_ptr<Extension> extension, Trigger trigger) {
  DPL_CHECK(extension != nullptr, "Trainer::extend: expected an extension, got null");
  DPL_CHECK(find(extension->name()) == nullptr, "Trainer::extend: an extension named '", extension->name(),
            "' is already there");
  DPL_CHECK(trigger.at_end || trigger.period >= 1, "Trainer::extend: expected a trigger period >= 1 for '",
            extension->name(), "', got ", trigger.period);
  extensions_.push_back({std::move(extension), trigger, extensions_.size()});
  std::stable_sort(extensions_.begin(), extensions_.end(), [](const Entry& a, const Entry& b) {
    return a.extension->priority() > b.extension->priority();
  });
}

void Trainer::add_generator(const std::string& name, Generator& gen) {
  for (const auto& [n, g] : generators_)
    DPL_CHECK(n != name, "Trainer::add_generator: a generator named '", name, "' is already there");
  generators_.emplace_back(name, &gen);
}

Extension* Trainer::find(const std::string& name) const {
  for (const Entry& e : extensions_)
    if (e.extension->name() == name) return e.extension.get();
  return nullptr;
}

namespace {

// Whether a is better than b; NaN never is, and every number is better than NaN.
bool better(double a, double b, Goal goal) {
  if (std::isnan(b)) return !std::isnan(a);
  return goal == Goal::kMinimize ? a < b : a > b;
}

// key's value in entry; an entry without it is refused, naming the keys it has.
double logged_value(const LogEntry& entry, const std::string& key, const std::string& who) {
  const auto v = entry.get(key);
  if (!v) {
    std::string keys;
    for (const auto& [k, value] : entry.values) keys += (keys.empty() ? "'" : ", '") + k + "'";
    DPL_CHECK(false, who, ": expected a value '", key, "' in the log entry of iteration ", entry.iteration,
              ", which has ", keys.empty() ? std::string("none") : keys,
              " (a key an Evaluator observes exists only in the entries it ran for)");
  }
  return *v;
}

}  // namespace

const TrainingLog& Trainer::value_log(const std::string& who) const {
  auto* report = find<extensions::LogReport>();
  DPL_CHECK(report != nullptr, who, ": expected a LogReport extension in the trainer, whose log holds the values "
            "it decides on; got none");
  // Created on first use; an entry-less log decides nothing.
  static const TrainingLog kEmpty("");
  return report->log() != nullptr ? *report->log() : kEmpty;
}

bool Trainer::stopped_early() const {
  if (stop_key_.empty()) return false;
  const std::string who = "Trainer (early stopping on '" + stop_key_ + "')";
  const auto& entries = value_log(who).log();
  const auto n = static_cast<std::int64_t>(entries.size());
  if (n <= patience_) return false;
  double before = logged_value(entries[0], stop_key_, who);
  for (std::int64_t i = 1; i < n - patience_; ++i) {
    const double v = logged_value(entries[static_cast<std::size_t>(i)], stop_key_, who);
    if (better(v, before, stop_goal_)) before = v;
  }
  for (std::int64_t i = n - patience_; i < n; ++i)
    if (better(logged_value(entries[static_cast<std::size_t>(i)], stop_key_, who), before, stop_goal_)) return false;
  return true;
}

bool Trainer::done() const {
  const data::BatchSource& it = updater_.iterator();
  return (unit_ == LengthUnit::kEpoch ? it.epoch() : it.iteration()) >= length_ || stopped_early();
}

bool Trainer::fires(const Entry& e, bool at_end, bool updated) const {
  const data::BatchSource& it = updater_.iterator();
  const Trigger& t = e.trigger;
  if (at_end) {
    if (t.at_end) return true;
    if (!updated || e.last_fired == it.iteration()) return false;
    if (t.best_key.empty()) return t.also_at_end;
  } else if (t.best_key.empty()) {
    return t.fires(it.iteration(), it.epoch(), it.is_new_epoch());
  }
  // A value trigger: the LogReport (a writer, so it ran first) closed an entry at this iteration
  // whose value beats every earlier entry's.
  const std::string who = "Trigger::best('" + t.best_key + "') of " + e.extension->name();
  const auto& entries = value_log(who).log();
  if (entries.empty() || entries.back().iteration != it.iteration()) return false;
  const double v = logged_value(entries.back(), t.best_key, who);
  for (std::size_t i = 0; i + 1 < entries.size(); ++i) {
    const auto earlier = entries[i].get(t.best_key);
    if (earlier && !better(v, *earlier, t.best_goal)) return false;
  }
  return !std::isnan(v);
}

void Trainer::run() {
  const data::BatchSource& it = updater_.iterator();
  if (comm_ != nullptr && comm_->size() > 1) {
    std::vector<comm::NamedValue> steps = {
        {"training length", std::to_string(length_) + (unit_ == LengthUnit::kEpoch ? " epochs" : " iterations")}};
    // Under a length in iterations, shards of different lengths are fine: every rank still runs
    // the same number of steps.
    if (unit_ == LengthUnit::kEpoch) steps.push_back({"batches per epoch", std::to_string(it.batches_per_epoch())});
    comm::check_settings_agree(*comm_, steps, "Trainer.run");
  }
  // Before any training: an output folder that cannot be written would otherwise fail at the
  // first log write, an epoch in. Every rank checks, since every rank may write (traces); a
  // trainer whose extensions write nothing there creates nothing.
  const bool writes = std::any_of(extensions_.begin(), extensions_.end(),
                                  [&](const Entry& e) { return e.extension->writes_output(*this); });
  if (!out_.empty() && writes) detail::prepare_output_folder(out_, "Trainer");
  // The moment every rank's trace is aligned on (profile::agree_on_clock): collective, and every
  // rank runs the same trainer over the same kind of optimizer.
  if (parallel::MultiNodeOptimizer* parallel = updater_.multi_node_optimizer())
    parallel->timer().set_clock_reference(profile::agree_on_clock(&parallel->communicator()));
  // Value triggers and early stopping need the log: refused now rather than an epoch in.
  if (!stop_key_.empty()) value_log("Trainer (early stopping on '" + stop_key_ + "')");
  for (const Entry& e : extensions_)
    if (!e.trigger.best_key.empty()) value_log("Trigger::best('" + e.trigger.best_key + "') of " + e.extension->name());
  for (Entry& e : extensions_) e.last_fired = -1;
  for (const Entry& e : extensions_) e.extension->initialize(*this);
  const std::int64_t updates_before = updater_.updates();
  const std::int64_t skipped_before = updater_.skipped_updates();
  bool updated = false;
  // Extensions read the model on every rank (evaluation) or rank 0's (snapshots, saved weights):
  // the ranks' buffers are made equal first (BufferSync::kBeforeUse). Every rank fires the same
  // extensions at the same iterations, so every rank takes part.
  parallel::MultiNodeOptimizer* const data_parallel = updater_.multi_node_optimizer();
  const auto sync_buffers = [data_parallel] {
    if (data_parallel != nullptr && data_parallel->buffer_sync() == parallel::BufferSync::kBeforeUse)
      data_parallel->synchronize_buffers();
  };
  while (!done()) {
    for (const Entry& e : extensions_) e.extension->before_update(*this);
    updater_.update(observation_);
    updated = true;
    bool synced = false;
    for (Entry& e : extensions_) {
      if (!fires(e, false, updated)) continue;
      if (!synced) sync_buffers();
      synced = true;
      (*e.extension)(*this);
      e.last_fired = it.iteration();
    }
  }
  // A run ends with equal buffers, whatever fired last.
  if (updated) sync_buffers();
  for (Entry& e : extensions_)
    if (fires(e, true, updated)) (*e.extension)(*this);
  for (const Entry& e : extensions_) e.extension->finalize(*this);
  // Every rank skips the same steps (the check reads the allreduced gradients), so every rank
  // ends alike.
  const std::int64_t steps = updater_.updates() - updates_before;
  const std::int64_t skipped = updater_.skipped_updates() - skipped_before;
  DPL_CHECK(steps == 0 || static_cast<double>(skipped) <= max_skipped_share_ * static_cast<double>(steps),
            "Trainer: ", skipped, " of the run's ", steps, " steps (", 100.0 * static_cast<double>(skipped) /
            static_cast<double>(steps), "%) were skipped for non-finite gradients, more than the allowed share ",
            max_skipped_share_, " (TrainerOptions::max_skipped_share): the run did not train");
}

namespace {
// The trainer's own values in a checkpoint: the observations not yet logged.
constexpr const char* kObservationKey = "trainer/observation";
}  // namespace

TrainingState Trainer::training_state(const char* who) {
  TrainingState state;
  state.model = &updater_.optimizer().target();
  state.optimizer = &updater_.optimizer();
  state.iterator = updater_.batch_iterator();
  state.source = updater_.global_source();
  // A checkpoint without the data position would resume on different batches: refused, not
  // written silently incomplete.
  DPL_CHECK(state.iterator != nullptr || state.source != nullptr, who,
            ": expected the updater to draw from a data::BatchIterator or a data::GlobalBatchSource, whose "
            "position a checkpoint holds; got another data::BatchSource (it must be given to the StandardUpdater "
            "as one of those types)");
  state.generators = generators_;
  state.generators.emplace_back("default", &default_generator());
  state.run_id = run_id_;
  if (auto* log = find<extensions::LogReport>()) state.log = log->log(*this);
  return state;
}

void Trainer::save(const std::string& path) {
  TrainingState state = training_state("Trainer::save");
  // Each rank's own sums: the log's all-rank means need every rank's, not rank 0's.
  state.rank_values[kObservationKey] = observation_.to_json();
  save_checkpoint(path, state, comm_.get());
}

void Trainer::resume(const std::string& path) {
  TrainingState state = training_state("Trainer::resume");
  // Unset marks a file written before each rank saved its own; such a file holds rank 0's sums.
  const std::string unset = "unset";
  state.rank_values[kObservationKey] = unset;
  load_checkpoint(path, state, comm_.get());
  run_id_ = state.run_id;
  std::string sums = state.rank_values[kObservationKey];
  const auto saved = state.saved_rank_values.find(kObservationKey);
  // Saved by another number of ranks: each rank takes their average, which keeps the log's
  // mean over the ranks.
  if (saved != state.saved_rank_values.end()) sums = Observation::average_json(saved->second);
  if (sums == unset) {
    const auto it = state.values.find(kObservationKey);
    sums = it == state.values.end() ? "[]" : it->second;
  }
  observation_.restore_json(sums, updater_.device());
  for (const Entry& e : extensions_) e.extension->resumed(*this);
}

}  // namespace dpl::train
