#include "dpl/train/trainer.hpp"

#include <algorithm>
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
      out_(options.out()) {
  DPL_CHECK(length_ >= 1, "Trainer: expected a training length >= 1, got ", length_);
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

bool Trainer::done() const {
  const data::BatchSource& it = updater_.iterator();
  return (unit_ == LengthUnit::kEpoch ? it.epoch() : it.iteration()) >= length_;
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
  for (const Entry& e : extensions_) e.extension->initialize(*this);
  while (!done()) {
    for (const Entry& e : extensions_) e.extension->before_update(*this);
    updater_.update(observation_);
    for (const Entry& e : extensions_)
      if (e.trigger.fires(it.iteration(), it.epoch(), it.is_new_epoch())) (*e.extension)(*this);
  }
  for (const Entry& e : extensions_)
    if (e.trigger.at_end) (*e.extension)(*this);
  for (const Entry& e : extensions_) e.extension->finalize(*this);
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
  // A checkpoint without the data position would resume on different batches: refused, not
  // written silently incomplete.
  DPL_CHECK(state.iterator != nullptr, who, ": expected the updater to draw from a data::BatchIterator, whose "
            "position a checkpoint holds; got another data::BatchSource (an image loader's position is not "
            "checkpointed; a BatchIterator must be given to the StandardUpdater as one)");
  state.generators = generators_;
  state.generators.emplace_back("default", &default_generator());
  state.run_id = run_id_;
  if (auto* log = find<extensions::LogReport>()) state.log = log->log(*this);
  return state;
}

void Trainer::save(const std::string& path) {
  TrainingState state = training_state("Trainer::save");
  state.values[kObservationKey] = observation_.to_json();
  save_checkpoint(path, state, comm_.get());
}

void Trainer::resume(const std::string& path) {
  TrainingState state = training_state("Trainer::resume");
  load_checkpoint(path, state, comm_.get());
  run_id_ = state.run_id;
  const auto it = state.values.find(kObservationKey);
  observation_.restore_json(it == state.values.end() ? "[]" : it->second, updater_.device());
  for (const Entry& e : extensions_) e.extension->resumed(*this);
}

}  // namespace dpl::train
