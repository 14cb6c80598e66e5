#pragma once
// What a training loop draws mini-batches from: the interface shared by BatchIterator (an
// in-memory data set) and ImageBatchSource (JPEG files through the threaded ImageLoader), so one
// StandardUpdater and one Trainer serve both.

#include <cstdint>

#include "dpl/tensor/tensor.hpp"

namespace dpl::data {

/// One mini-batch: x of shape (B, ...) and y of shape (B,) int32. x is float32 on the host as
/// BatchIterator serves it; a source may serve device tensors (ImageBatchSource with a GPU
/// delivery, synthetic data resident on the GPU), in the model's dtype (bfloat16, float16), which
/// the updater then uses without a copy.
struct Batch {
  Tensor x;  ///< samples, (B, ...) float32, bfloat16 or float16
  Tensor y;  ///< labels, (B,) int32
  /// Number of samples B (0 for an undefined batch).
  std::int64_t size() const { return y.defined() ? y.size(0) : 0; }
};

/// An endless (or, for evaluation, one-pass) supply of mini-batches with Chainer's iterator
/// counters, which the Trainer's triggers, logs and progress bar read.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /// The next mini-batch. Ensures: iteration() grew by one; is_new_epoch() says whether this
  /// batch ended an epoch. Throws dpl::Error when no batch can be served (with the reason).
  virtual Batch next() = 0;
  /// Completed epochs.
  virtual std::int64_t epoch() const = 0;
  /// Batches served so far.
  virtual std::int64_t iteration() const = 0;
  /// True when the last next() finished an epoch.
  virtual bool is_new_epoch() const = 0;
  /// epoch() plus the fraction of the current epoch already served (Chainer's epoch_detail).
  virtual double epoch_detail() const = 0;
  /// Batches in one epoch.
  virtual std::int64_t batches_per_epoch() const = 0;
};

}  // namespace dpl::data
