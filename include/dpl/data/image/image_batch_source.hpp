#pragma once
// The ImageLoader as a BatchSource, so a StandardUpdater (and a Trainer) trains from JPEG files
// and an Evaluator validates on them.

#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "dpl/core/device.hpp"
#include "dpl/core/dtype.hpp"
#include "dpl/data/batch_source.hpp"
#include "dpl/data/global_batch_source.hpp"
#include "dpl/data/image/loader.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::data {

/// Where an ImageBatchSource delivers its batches, and in which form: the model's device, compute
/// dtype and memory format, so that the batch goes into the model as it comes.
struct ImageDelivery {
  /// The device of the images and labels. A GPU: the 8-bit batch travels to it (a quarter of the
  /// bytes of float32) on the GPU's copy stream and is normalised there. The CPU: normalised on
  /// the host.
  Device device = Device::cpu();
  /// The images' dtype: float32, bfloat16 or float16.
  DType dtype = kFloat32;
  /// The images' memory format: channels-last (the loader's own element order) or contiguous NCHW.
  MemoryFormat format = MemoryFormat::kChannelsLast;
};

/// Batches of an ImageLoader as (N, C, H, W) image tensors with (x - mean[c]) / std[c] applied
/// (normalize_images, in pixel units) and int32 labels (N,), in the dtype, memory format and on
/// the device that `delivery` names. The default delivery is float32 channels-last on the host,
/// the values of ImageBatch::to_float.
///
/// On a GPU (delivery.device a CUDA device), next() returns device tensors, so the updater's copy
/// to the device does nothing:
///  - each batch's uint8 images and labels are copied from the loader's pinned buffer on the
///    GPU's copy stream, and the compute stream waits for that copy (an event, not a host wait)
///    before it normalises the images;
///  - when next() returns batch k it has already taken batch k+1 from the loader and queued its
///    copy, so that the copy runs while the compute stream trains on batch k. The loader is
///    therefore one batch ahead of iteration(): it holds one of the loader's `prefetch` buffers
///    (and the device memory of one uint8 batch) from one call to the next;
///  - a pinned buffer goes back to the loader only once its copy has finished (the host waits for
///    that copy's event, which is normally long done, at the next call).
/// An error of the prefetched batch (a corrupt JPEG) does not fail the call that prefetched it: it
/// is thrown by the next call, where the batch would have come. Without pinned buffers
/// (ImageLoaderOptions::pin_memory off) the copies still work but the driver makes them
/// synchronous.
///
/// Epoch counters follow the batches served: an epoch is the loader's batches_per_epoch()
/// batches, and epoch_detail() is the epochs completed plus the share of the current epoch's
/// batches served. Errors of the loader (a missing file, a corrupt JPEG, with the list file and
/// line) come out of next() as the loader throws them.
///
/// Its position is global (GlobalBatchSource): a loader whose options split each global batch
/// among the processes (ImageLoaderOptions::rank, world_size) over the whole job's indices
/// resumes from a checkpoint on any number of processes with the same global batch. (A loader of
/// a rank's own shard of indices has a position of that shard only: a program checkpointing one
/// names the shard with set_order_settings, so that another rank's state is refused.)
class ImageBatchSource : public GlobalBatchSource {
 public:
  /// Requires a loader, mean/std as normalize_images accepts them for the loader's channels (one
  /// entry per channel, or one for all; std non-zero), a float delivery dtype, and for a GPU
  /// delivery a GPU that exists: dpl::Error otherwise, checked here rather than at the first batch.
  ImageBatchSource(std::unique_ptr<ImageLoader> loader, std::vector<float> mean, std::vector<float> std,
                   ImageDelivery delivery = {});
  /// Waits for a prefetched batch's copy (never for the compute stream) before its buffer goes
  /// back to the loader.
  ~ImageBatchSource() override;
  ImageBatchSource(const ImageBatchSource&) = delete;
  ImageBatchSource& operator=(const ImageBatchSource&) = delete;

  Batch next() override;
  std::int64_t epoch() const override { return epoch_; }
  std::int64_t iteration() const override { return iteration_; }
  bool is_new_epoch() const override { return is_new_epoch_; }
  double epoch_detail() const override { return epoch_detail_; }
  std::int64_t batches_per_epoch() const override { return loader_->batches_per_epoch(); }
  std::int64_t global_batch() const override;
  /// The settings it records are "shuffle", "seed" and "drop last", then the program's
  /// (set_order_settings).
  GlobalDataState global_state() const override;
  /// See GlobalBatchSource::load_global_state; the counters must also agree (epoch = iteration
  /// div batches_per_epoch(), position = (iteration mod batches_per_epoch()) · global batch).
  /// Restarts the loader at the saved batch (ImageLoader::restart_at); a batch prefetched for the
  /// GPU is dropped.
  void load_global_state(const GlobalDataState& state) override;
  /// The loader the batches come from (one batch ahead of this source on a GPU, see above).
  ImageLoader& loader() const { return *loader_; }
  /// Where the batches are delivered.
  const ImageDelivery& delivery() const { return delivery_; }

 private:
  struct InFlight;  // a batch whose copy to the GPU is queued
  std::unique_ptr<InFlight> start_copy(ImageBatch batch) const;
  void count(const ImageBatch& batch);

  std::unique_ptr<ImageLoader> loader_;
  std::vector<float> mean_, std_;
  ImageDelivery delivery_;
  std::unique_ptr<InFlight> in_flight_;  // GPU delivery: the next batch
  std::exception_ptr prefetch_error_;     // GPU delivery: what taking the next batch threw
  std::int64_t epoch_ = 0;
  std::int64_t iteration_ = 0;
  bool is_new_epoch_ = false;
  double epoch_detail_ = 0.0;
};

}  // namespace dpl::data
