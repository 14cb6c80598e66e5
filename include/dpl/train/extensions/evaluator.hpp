#pragma once
// Chainer's Evaluator: validation loss and accuracy observed by a trainer.

#include <cstdint>
#include <memory>
#include <string>

#include "dpl/data/batch_source.hpp"
#include "dpl/data/dataset.hpp"
#include "dpl/train/extension.hpp"

namespace dpl::train::extensions {

/// Evaluates the model on a data set (train::evaluate, collective over the trainer's
/// communicator) and observes "<prefix>loss" and "<prefix>accuracy". Default trigger: every epoch, and at the end of a run whose last update did
/// not evaluate (so a run shorter than an epoch is still evaluated once).
class Evaluator : public Extension {
 public:
  /// Requires batch_size >= 1; dataset outlives the extension (it is held by value: cheap views).
  Evaluator(data::Dataset dataset, std::int64_t batch_size, std::string prefix = "validation/main/");
  /// Evaluates `batches` batches of source each time it runs: one epoch of a source that serves
  /// the same batches every epoch (an ImageBatchSource over an unshuffled validation shard).
  /// Requires a non-null source and batches >= 1 (dpl::Error otherwise).
  Evaluator(std::shared_ptr<data::BatchSource> source, std::int64_t batches, std::string prefix = "validation/main/");
  Trigger default_trigger() const override { return Trigger::epochs(1).and_at_end(); }
  std::string name() const override { return "Evaluator"; }
  int priority() const override { return kPriorityWriter; }
  void operator()(Trainer& trainer) override;

 private:
  data::Dataset dataset_;
  std::shared_ptr<data::BatchSource> source_;  // set: evaluate batches_ of it instead of dataset_
  std::int64_t batch_size_ = 0;
  std::int64_t batches_ = 0;
  std::string prefix_;
};

}  // namespace dpl::train::extensions
