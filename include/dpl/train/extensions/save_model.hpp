#pragma once
// Saving the model's weights alone on a trigger: with Trigger::best, the best model of a run.

#include <string>

#include "dpl/train/extension.hpp"

namespace dpl::train::extensions {

/// Writes the trained model's parameters and buffers (serialize::save_weights) to
/// <trainer.out()>/<filename>, or to filename itself when it is an absolute path, replacing the
/// file atomically, on rank 0 (the model is the same on every rank). Typical use keeps the best
/// model of a run:
///
///     trainer.extend(std::make_shared<SaveModel>("best_model.safetensors"),
///                    Trigger::best("validation/main/loss", Goal::kMinimize));
///
/// The file loads with serialize::load_weights into the same model, in any program.
/// Default trigger: at the end of training. Its name is "SaveModel:<filename>", so one trainer
/// may keep several files (the best and the last).
class SaveModel : public Extension {
 public:
  /// Requires a non-empty filename (dpl::Error otherwise).
  explicit SaveModel(std::string filename = "model.safetensors");
  std::string name() const override { return "SaveModel:" + filename_; }
  Trigger default_trigger() const override { return Trigger::end(); }
  int priority() const override { return kPrioritySnapshot; }
  /// True unless filename is an absolute path.
  bool writes_output(const Trainer& trainer) const override;
  void operator()(Trainer& trainer) override;

 private:
  std::string filename_;
};

}  // namespace dpl::train::extensions
