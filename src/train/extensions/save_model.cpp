#include "dpl/train/extensions/save_model.hpp"

#include <filesystem>
#include <utility>

#include "dpl/core/error.hpp"
#include "dpl/serialize/weights.hpp"
#include "dpl/train/trainer.hpp"

namespace dpl::train::extensions {

SaveModel::SaveModel(std::string filename) : filename_(std::move(filename)) {
  DPL_CHECK(!filename_.empty(), "SaveModel: expected a file name, got an empty one");
}

bool SaveModel::writes_output(const Trainer& /*trainer*/) const {
  return !std::filesystem::path(filename_).is_absolute();
}

void SaveModel::operator()(Trainer& trainer) {
  if (!trainer.is_root()) return;
  const std::filesystem::path file(filename_);
  const std::filesystem::path path = file.is_absolute() ? file : std::filesystem::path(trainer.out()) / file;
  serialize::save_weights(trainer.updater().optimizer().target(), path.string());
}

}  // namespace dpl::train::extensions
