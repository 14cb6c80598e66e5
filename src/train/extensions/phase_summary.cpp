#include "dpl/train/extensions/phase_summary.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/atomic_file.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/core/error.hpp"
#include "dpl/core/threads.hpp"
#include "dpl/parallel/multi_node_optimizer.hpp"
#include "dpl/profile/phase_timer.hpp"
#include "dpl/train/trainer.hpp"

namespace dpl::train::extensions {

PhaseSummary::PhaseSummary(std::int64_t skip_warmup, std::ostream& out) : skip_warmup_(skip_warmup), out_(out) {}

bool PhaseSummary::writes_output(const Trainer& trainer) const {
  return trainer.updater().multi_node_optimizer() != nullptr;
}

void PhaseSummary::operator()(Trainer& trainer) {
  const StandardUpdater& updater = trainer.updater();
  parallel::MultiNodeOptimizer* parallel = updater.multi_node_optimizer();
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

}  // namespace dpl::train::extensions
