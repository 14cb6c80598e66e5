#include "dpl/train/extensions/snapshot.hpp"

#include <filesystem>
#include <system_error>
#include <utility>

#include "dpl/core/error.hpp"
#include "dpl/train/checkpoint.hpp"
#include "dpl/train/trainer.hpp"

namespace dpl::train::extensions {

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

}  // namespace dpl::train::extensions
