#pragma once
// Validation loss and accuracy over a data set that may be sharded across ranks.

#include <cstdint>

#include "dpl/comm/communicator.hpp"
#include "dpl/data/batch_source.hpp"
#include "dpl/data/dataset.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::train {

/// Result of evaluate(): means over every sample of every rank's data set.
struct EvalResult {
  double loss = 0.0;          ///< mean softmax cross-entropy per sample
  double accuracy = 0.0;      ///< fraction of samples whose arg-max logit is the label
  std::int64_t samples = 0;   ///< total samples evaluated, over all ranks
};

/// Runs model over dataset in batches of batch_size (in order, the last batch partial) and
/// returns the mean softmax cross-entropy and the accuracy of its logits against the labels.
///
/// The model runs in eval mode under a NoGradGuard; its previous train/eval mode is restored on
/// return, also when an exception leaves. Batches are moved to the model's device.
/// With a communicator, the result covers the union of all ranks' data sets: each rank's sums
/// (loss*count, correct, count) are gathered as exact float64/int64 values and added in rank
/// order, so shards of different sizes are weighted by their sample counts and every rank gets
/// the same, bit-identical result. comm == nullptr evaluates this process's data set alone.
///
/// Requires: batch_size >= 1; a model mapping (B, ...) to logits (B, C) with labels in [0, C);
/// at least one sample over all ranks (a rank's own data set may be empty).
/// Collective when comm is given: every rank of comm must call it.
/// Throws dpl::Error for batch_size < 1 or when no rank has a sample, and whatever the model's
/// ops throw for mismatched shapes.
EvalResult evaluate(nn::Module& model, const data::Dataset& dataset, std::int64_t batch_size,
                    comm::Communicator* comm = nullptr);

/// evaluate over the next `batches` batches of source instead of a data set: one epoch of a
/// source that serves the same batches every epoch (an unshuffled validation shard). Same
/// guarantees and collective sums as above; a rank may evaluate a different number of batches
/// (shards of different sizes), including none (batches == 0).
/// Requires batches >= 0; throws dpl::Error as above and whatever source.next() throws (a missing
/// or corrupt image, with its list file and line).
EvalResult evaluate(nn::Module& model, data::BatchSource& source, std::int64_t batches,
                    comm::Communicator* comm = nullptr);

}  // namespace dpl::train
