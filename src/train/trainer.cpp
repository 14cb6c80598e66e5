#include "dpl/train/trainer.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/atomic_file.hpp"
#include "dpl/autograd/ops.hpp"
#include "dpl/comm/agreement.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/core/error.hpp"
#include "dpl/core/threads.hpp"
#include "dpl/parallel/multi_node_optimizer.hpp"
#include "dpl/profile/phase_timer.hpp"
#include "dpl/train/checkpoint.hpp"
#include "dpl/train/evaluator.hpp"

namespace dpl::train {

// --- Trigger -------------------------------------------------------------------------------------

Trigger Trigger::iterations(std::int64_t n) {
  DPL_CHECK(n >= 1, "Trigger::iterations: expected a period >= 1, got ", n);
  return {n, LengthUnit::kIteration, false};
}
Trigger Trigger::epochs(std::int64_t n) {
  DPL_CHECK(n >= 1, "Trigger::epochs: expected a period >= 1, got ", n);
  return {n, LengthUnit::kEpoch, false};
}
Trigger Trigger::end() { return {1, LengthUnit::kIteration, true}; }

bool Trigger::fires(std::int64_t iteration, std::int64_t epoch, bool is_new_epoch) const {
  if (at_end) return false;
  if (unit == LengthUnit::kIteration) return iteration % period == 0;
  return is_new_epoch && epoch % period == 0;
}

// --- Observation ---------------------------------------------------------------------------------

Observation::Sum& Observation::slot(const std::string& key) {
  for (Sum& s : sums_)
    if (s.key == key) return s;
  sums_.push_back(Sum{key, Tensor(), 0.0, 0});
  return sums_.back();
}

void Observation::reserve(const std::string& key) { slot(key); }

void Observation::observe(const std::string& key, const Tensor& value) {
  if (recording_ != nullptr) {
    recording_->emplace_back(key, value);
    return;
  }
  const bool floating = value.defined() && (value.dtype() == kFloat32 || value.dtype() == kBFloat16 ||
                                            value.dtype() == kFloat16);
  DPL_CHECK(floating && value.numel() == 1, "Observation::observe: expected '", key,
            "' to be a one-element float32, bfloat16 or float16 tensor, got ",
            value.defined() ? detail::concat(value.dtype(), " of shape ", shape_str(value.shape())) : "undefined");
  Sum& s = slot(key);
  NoGradGuard no_grad;
  // 16-bit values (a loss under mixed precision) are summed in float32, so long sums keep their
  // digits; the cast stays on the value's device.
  const Tensor v = (value.dtype() == kFloat32 ? value : value.to(kFloat32)).reshape({});
  s.device_sum = s.device_sum.defined() ? add(Variable(s.device_sum), Variable(v)).data() : v.clone();
  ++s.count;
}

void Observation::observe(const std::string& key, double value) {
  DPL_CHECK(recording_ == nullptr, "Observation::observe: '", key, "' is a host number, observed while a training ",
            "step is recorded as a CUDA graph, where it would keep its first value; observe a one-element tensor");
  Sum& s = slot(key);
  s.host_sum += value;
  ++s.count;
}

std::vector<std::pair<std::string, double>> Observation::take_means() {
  std::vector<std::pair<std::string, double>> out;
  for (Sum& s : sums_) {
    if (s.count == 0) continue;
    const double total = s.host_sum + (s.device_sum.defined() ? static_cast<double>(s.device_sum.item()) : 0.0);
    out.emplace_back(s.key, total / static_cast<double>(s.count));
    s.device_sum = Tensor();
    s.host_sum = 0.0;
    s.count = 0;
  }
  return out;
}

std::string Observation::to_json() const {
  nlohmann::ordered_json sums = nlohmann::ordered_json::array();
  for (const Sum& s : sums_) {
    nlohmann::ordered_json device = nullptr;
    if (s.device_sum.defined()) device = static_cast<double>(s.device_sum.item());
    sums.push_back(nlohmann::ordered_json::array({s.key, device, s.host_sum, s.count}));
  }
  return sums.dump();
}

void Observation::restore_json(const std::string& text, Device device) {
  std::vector<Sum> sums;
  try {
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    for (const auto& e : j) {
      // get<std::int64_t>() of a float beyond int64's range (1e300) is undefined behaviour, and a
      // checkpoint's values are input: take counts only as the integers to_json writes.
      const auto& count = e.at(3);
      constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
      const bool whole = count.is_number_unsigned() ? count.get<std::uint64_t>() <= kMax
                                                    : count.is_number_integer() && count.get<std::int64_t>() >= 0;
      DPL_CHECK(whole, "Observation::restore_json: expected counts that are whole numbers >= 0, got ", count.dump(),
                " in '", text, "'");
      Sum s{e.at(0).get<std::string>(), Tensor(), e.at(2).get<double>(), count.get<std::int64_t>()};
      if (!e.at(1).is_null())
        s.device_sum = Tensor::full({}, e.at(1).get<double>(), TensorOptions(kFloat32, device));
      sums.push_back(std::move(s));
    }
  } catch (const nlohmann::json::exception& e) {
    DPL_FAIL("Observation::restore_json: expected the text Observation::to_json writes, got '", text, "' (",
             e.what(), ")");
  }
  sums_ = std::move(sums);
}

// --- StandardUpdater -----------------------------------------------------------------------------

StandardUpdater::StandardUpdater(data::BatchSource& iterator, optim::Optimizer& optimizer, LossFunction loss,
                                 Device device)
    : iterator_(iterator), optimizer_(optimizer), loss_(std::move(loss)), device_(device) {
  DPL_CHECK(static_cast<bool>(loss_), "StandardUpdater: expected a loss function, got an empty one");
}

void StandardUpdater::set_graph_capture(bool on, int warmup_steps) {
  captured_.reset();
  recorded_values_.clear();
  if (!on) return;
  DPL_CHECK(device_.is_cuda(), "StandardUpdater::set_graph_capture: recording the step needs a CUDA device; the ",
            "updater's device is ", device_);
  const std::string why = optimizer_.replay_refusal();
  DPL_CHECK(why.empty(), "StandardUpdater::set_graph_capture: the optimizer cannot run a recorded step: ", why);
  captured_ = std::make_unique<CapturedStep>(
      optimizer_,
      [this](const std::vector<Tensor>& inputs) {
        const data::Batch batch{inputs[0], inputs[1]};
        if (!captured_->capturing()) return loss_(batch, *observation_);
        Observation recorder;
        recorder.record_into(&recorded_values_);
        return loss_(batch, recorder);
      },
      warmup_steps);
}

void StandardUpdater::update(Observation& observation) {
  const double t0 = profile::now_seconds();
  const data::Batch host = iterator_.next();
  const data::Batch batch{host.x.to(device_), host.y.to(device_)};
  const double waited = profile::now_seconds() - t0;
  data_seconds_ += waited;
  // Recorded with the optimizer's phases, under the iteration its update will have, so a loop
  // starved by its loader shows in the timeline and in the summary next to compute and allreduce.
  auto* parallel = dynamic_cast<parallel::MultiNodeOptimizer*>(&optimizer_);
  if (parallel != nullptr) parallel->timer().record("data", t0, waited, updates_);
  observation.reserve("main/loss");
  Variable loss;
  if (captured_ != nullptr) {
    observation_ = &observation;
    const std::int64_t replays = captured_->replays();
    loss = captured_->update({batch.x, batch.y});
    // The iteration waits for its GPU work below anyway: its verdict costs nothing more, and a
    // non-finite step stops in its own iteration, as an ordinary one does.
    captured_->settle();
    // A replay ran the recorded loss function's kernels: observe what they wrote.
    if (captured_->replays() > replays)
      for (const auto& [key, value] : recorded_values_) observation.observe(key, value);
  } else {
    loss = optimizer_.update([&] { return loss_(batch, observation); });
  }
  observation.observe("main/loss", loss.data());
  // Only under kSkip, so that other runs keep their log's columns; the verdict is known on the
  // host already (the check read its flag), so this costs no wait.
  if (optimizer_.non_finite_policy() == optim::NonFinitePolicy::kSkip)
    observation.observe("main/skipped_steps", optimizer_.last_step_skipped() ? 1.0 : 0.0);
  if (device_.is_cuda()) cuda::synchronize(device_.index);  // the iteration's time includes its GPU work
  const double seconds = profile::now_seconds() - t0;
  update_seconds_ += seconds;
  // The whole iteration beside its phases: what they leave out shows as the difference.
  if (parallel != nullptr) parallel->timer().record(profile::kIterationSeries, t0, seconds, updates_);
  ++updates_;
}

// --- Trainer -------------------------------------------------------------------------------------

void prepare_output_folder(const std::string& folder) { detail::prepare_output_folder(folder, "output folder"); }

Trainer::Trainer(StandardUpdater& updater, std::int64_t length, LengthUnit unit, comm::Communicator* comm,
                 std::string out)
    : updater_(updater), length_(length), unit_(unit), comm_(comm), out_(std::move(out)) {
  DPL_CHECK(length >= 1, "Trainer: expected a training length >= 1, got ", length);
  // Before any training: an output folder that cannot be written would otherwise fail at the
  // first log write, an epoch in. Every rank checks, since every rank may write (traces).
  if (!out_.empty()) detail::prepare_output_folder(out_, "Trainer");
  observation_.reserve("main/loss");  // the first column of the log, as in Chainer's
}

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
  // The moment every rank's trace is aligned on (profile::agree_on_clock): collective, and every
  // rank runs the same trainer over the same kind of optimizer.
  if (auto* parallel = dynamic_cast<parallel::MultiNodeOptimizer*>(&updater_.optimizer()))
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
  state.iterator = dynamic_cast<data::BatchIterator*>(&updater_.iterator());
  // A checkpoint without the data position would resume on different batches: refused, not
  // written silently incomplete.
  DPL_CHECK(state.iterator != nullptr, who, ": expected the updater to draw from a data::BatchIterator, whose "
            "position a checkpoint holds; got another data::BatchSource (an image loader's position is not "
            "checkpointed)");
  state.generators = generators_;
  state.generators.emplace_back("default", &default_generator());
  state.run_id = run_id_;
  if (auto* log = find<extensions::LogReport>()) state.log = log->log(*this);
  return state;
}

void Trainer::save(const std::string& path) {
  TrainingState state = training_state("Trainer::save");
  state.values[kObservationKey] = observation_.to_json();
  save_checkpoint(path, state, comm_);
}

void Trainer::resume(const std::string& path) {
  TrainingState state = training_state("Trainer::resume");
  load_checkpoint(path, state, comm_);
  run_id_ = state.run_id;
  const auto it = state.values.find(kObservationKey);
  observation_.restore_json(it == state.values.end() ? "[]" : it->second, updater_.device());
  for (const Entry& e : extensions_) e.extension->resumed(*this);
}

namespace extensions {

// --- Evaluator -----------------------------------------------------------------------------------

Evaluator::Evaluator(data::Dataset dataset, std::int64_t batch_size, std::string prefix)
    : dataset_(std::move(dataset)), batch_size_(batch_size), prefix_(std::move(prefix)) {
  DPL_CHECK(batch_size >= 1, "Evaluator: expected a batch size >= 1, got ", batch_size);
}

Evaluator::Evaluator(std::shared_ptr<data::BatchSource> source, std::int64_t batches, std::string prefix)
    : source_(std::move(source)), batches_(batches), prefix_(std::move(prefix)) {
  DPL_CHECK(source_ != nullptr, "Evaluator: expected a batch source, got null");
  DPL_CHECK(batches >= 1, "Evaluator: expected >= 1 batches per evaluation, got ", batches);
}

void Evaluator::operator()(Trainer& trainer) {
  nn::Module& model = trainer.updater().optimizer().target();
  const EvalResult r = source_ ? evaluate(model, *source_, batches_, trainer.communicator())
                               : evaluate(model, dataset_, batch_size_, trainer.communicator());
  trainer.observation().observe(prefix_ + "loss", r.loss);
  trainer.observation().observe(prefix_ + "accuracy", r.accuracy);
}

// --- LogReport -----------------------------------------------------------------------------------

LogReport::LogReport(std::string filename) : filename_(std::move(filename)) {}

train::LogReport* LogReport::log(Trainer& trainer) {
  if (!log_ && trainer.is_root()) log_ = std::make_unique<train::LogReport>(trainer.out(), filename_);
  return log_.get();
}

void LogReport::operator()(Trainer& trainer) {
  // Every rank takes the means, so every rank's sums restart alike; rank 0 keeps the log.
  const auto means = trainer.observation().take_means();
  train::LogReport* log = this->log(trainer);
  if (log == nullptr) return;
  for (const auto& [key, value] : means) log->observe(key, value);
  const data::BatchSource& it = trainer.updater().iterator();
  log->end_epoch(it.epoch(), it.iteration());
}

// --- PrintReport ---------------------------------------------------------------------------------

PrintReport::PrintReport(std::vector<std::string> entries, std::ostream& out)
    : entries_(std::move(entries)), out_(out) {}

void PrintReport::operator()(Trainer& trainer) {
  if (!trainer.is_root()) return;
  auto* log_ext = trainer.find<LogReport>();
  DPL_CHECK(log_ext != nullptr, "PrintReport: the trainer has no LogReport extension to print");
  const train::LogReport* log = log_ext->log(trainer);
  if (!report_) report_ = std::make_unique<train::PrintReport>(out_, entries_);
  for (; printed_ < log->log().size(); ++printed_) report_->print(log->log()[printed_]);
}

void PrintReport::resumed(Trainer& trainer) {
  // The restored entries were printed by the run that made them.
  auto* log_ext = trainer.find<LogReport>();
  if (log_ext != nullptr && log_ext->log(trainer) != nullptr) printed_ = log_ext->log(trainer)->log().size();
}

// --- ProgressBar ---------------------------------------------------------------------------------

ProgressBar::ProgressBar(ProgressBarOptions options, std::ostream& out) : options_(options), out_(out) {}

void ProgressBar::operator()(Trainer& trainer) {
  if (!trainer.is_root()) return;
  if (!bar_) bar_ = std::make_unique<train::ProgressBar>(trainer.length(), trainer.unit(), out_, options_);
  const data::BatchSource& it = trainer.updater().iterator();
  bar_->update(it.iteration(), it.epoch_detail());
}

void ProgressBar::finalize(Trainer& /*trainer*/) {
  if (bar_) bar_->close();
}

// --- Snapshot ------------------------------------------------------------------------------------

Snapshot::Snapshot(std::string folder, std::int64_t keep) : folder_(std::move(folder)), keep_(keep) {
  DPL_CHECK(keep >= 1, "Snapshot: expected to keep >= 1 checkpoints, got ", keep);
}

void Snapshot::operator()(Trainer& trainer) {
  const std::string folder = folder_.empty() ? trainer.out() : folder_;
  if (trainer.is_root()) {
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);  // a failure shows as save_checkpoint's, on every rank
  }
  trainer.save((std::filesystem::path(folder) / checkpoint_name(trainer.updater().iterator().iteration())).string());
  if (trainer.is_root()) remove_old_checkpoints(folder, keep_, trainer.run_id());
}

// --- LrSchedule ----------------------------------------------------------------------------------

LrSchedule::LrSchedule(std::shared_ptr<const optim::LrSchedule> schedule) : schedule_(std::move(schedule)) {
  DPL_CHECK(schedule_ != nullptr, "LrSchedule: expected a schedule, got null");
}

void LrSchedule::before_update(Trainer& trainer) {
  optim::Optimizer& opt = trainer.updater().optimizer();
  schedule_->apply(opt, opt.t());
  trainer.observation().observe("lr", static_cast<double>(opt.lr()));
}

// --- PhaseSummary --------------------------------------------------------------------------------

PhaseSummary::PhaseSummary(std::int64_t skip_warmup, std::ostream& out) : skip_warmup_(skip_warmup), out_(out) {}

void PhaseSummary::operator()(Trainer& trainer) {
  const StandardUpdater& updater = trainer.updater();
  auto* parallel = dynamic_cast<parallel::MultiNodeOptimizer*>(&updater.optimizer());
  profile::Summary summary;
  if (parallel != nullptr) summary = parallel->summary(skip_warmup_);  // collective
  if (!trainer.is_root()) return;
  if (parallel != nullptr) {
    const bool sync = parallel->timing_mode() == profile::TimingMode::kSynchronized;
    out_ << "\nPhase summary (" << (sync ? "synchronized" : "non-intrusive") << " timing, "
         << parallel->communicator().name() << " communicator, " << parallel->communicator().size()
         << " processes)\n"
         << profile::format_table(summary);
  }
  const double seconds = updater.update_seconds();
  if (updater.updates() == 0) {
    out_ << "training: no iterations in this process (a resumed run that had already reached its length)\n";
  } else {
    out_ << "training: " << updater.updates() << " iterations in " << seconds << " s, "
         << static_cast<double>(updater.updates()) / seconds << " iters/s per process, " << num_threads()
         << " threads per process\n";
  }
  if (updater.device().is_cuda()) {
    out_ << "peak device memory (rank 0): " << static_cast<double>(cuda::memory_stats(updater.device().index).peak) / 1e6
         << " MB\n";
  }
  out_.flush();
  // An empty output folder means no files (Trainer's contract), not a folder named "".
  if (parallel != nullptr && !trainer.out().empty()) {
    std::error_code ec;
    std::filesystem::create_directories(trainer.out(), ec);
    DPL_CHECK(!ec, "PhaseSummary: cannot create the output folder ", trainer.out(), ": ", ec.message());
    // What a scaling study needs beside the phases: the run's shape and its measured rate.
    nlohmann::json j = nlohmann::json::parse(profile::to_json(summary));
    j["communicator"] = parallel->communicator().name();
    j["nodes"] = parallel->communicator().inter_size();
    j["timing"] = parallel->timing_mode() == profile::TimingMode::kSynchronized ? "synchronized" : "non-intrusive";
    j["threads_per_process"] = num_threads();
    j["training_iterations"] = updater.updates();
    j["training_seconds"] = seconds;
    j["data_seconds"] = updater.data_seconds();
    detail::write_file_atomically((std::filesystem::path(trainer.out()) / "phase_summary.json").string(),
                                  j.dump(2) + "\n", "PhaseSummary");
  }
}

}  // namespace extensions
}  // namespace dpl::train
