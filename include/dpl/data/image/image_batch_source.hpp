#pragma once
// The ImageLoader as a BatchSource, so a StandardUpdater (and a Trainer) trains from JPEG files
// and an Evaluator validates on them.

#include <cstdint>
#include <memory>
#include <vector>

#include "dpl/data/batch_source.hpp"
#include "dpl/data/image/loader.hpp"

namespace dpl::data {

/// Batches of an ImageLoader as float32 (N, C, H, W) tensors in channels-last memory order with
/// (x - mean[c]) / std[c] applied (ImageBatch::to_float, in pixel units), and int32 labels, on
/// the host.
///
/// Epoch counters follow the loader's batches: an epoch is the loader's batches_per_epoch()
/// batches, and epoch_detail() is the epochs completed plus the share of the current epoch's
/// batches served. Errors of the loader (a missing file, a corrupt JPEG, with the list file and
/// line) come out of next() as the loader throws them.
class ImageBatchSource : public BatchSource {
 public:
  /// Requires a loader and mean/std as normalize_to_float accepts them (one entry per channel, or
  /// one for all; std non-zero): dpl::Error otherwise, checked here rather than at the first batch.
  ImageBatchSource(std::unique_ptr<ImageLoader> loader, std::vector<float> mean, std::vector<float> std);

  Batch next() override;
  std::int64_t epoch() const override { return epoch_; }
  std::int64_t iteration() const override { return loader_->iteration(); }
  bool is_new_epoch() const override { return loader_->is_new_epoch(); }
  double epoch_detail() const override { return epoch_detail_; }
  std::int64_t batches_per_epoch() const override { return loader_->batches_per_epoch(); }
  /// The loader the batches come from.
  ImageLoader& loader() const { return *loader_; }

 private:
  std::unique_ptr<ImageLoader> loader_;
  std::vector<float> mean_, std_;
  std::int64_t epoch_ = 0;
  double epoch_detail_ = 0.0;
};

}  // namespace dpl::data
