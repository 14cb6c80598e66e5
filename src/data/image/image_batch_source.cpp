#include "dpl/data/image/image_batch_source.hpp"

#include <algorithm>
#include <utility>

#include "backend/side_stream_copy.hpp"
#include "dpl/core/error.hpp"
#include "dpl/data/image/normalize.hpp"

namespace dpl::data {

// A batch taken from the loader whose copy to the GPU is queued: the loader's buffer (kept until
// the copy is done), the device tensors the copy fills, and the copy's events.
struct ImageBatchSource::InFlight {
  ImageBatch batch;
  Tensor images;  // (N, H, W, C) uint8 on the GPU
  Tensor labels;  // (N,) int32 on the GPU
  backend::SideStreamCopy copy;

  InFlight() = default;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  // The loader may rewrite the pinned buffer as soon as `batch` goes, so the copy from it must be
  // over first. Members go after this body: the copy's own destructor then orders the compute
  // stream after it, before the device tensors return to the allocator.
  ~InFlight() {
    try {
      copy.wait();
    } catch (...) {
      // A failed device: nothing is copying any more.
    }
  }
};

ImageBatchSource::ImageBatchSource(std::unique_ptr<ImageLoader> loader, std::vector<float> mean,
                                   std::vector<float> std, ImageDelivery delivery)
    : loader_(std::move(loader)), mean_(std::move(mean)), std_(std::move(std)), delivery_(delivery) {
  const char* op = "ImageBatchSource";
  DPL_CHECK(loader_ != nullptr, op, ": expected an image loader, got null");
  DPL_CHECK(!mean_.empty() && !std_.empty(), op, ": expected a mean and a std (one value per channel, or one for all), "
            "got ", mean_.size(), " and ", std_.size(), " values");
  DPL_CHECK(is_float_dtype(delivery_.dtype), op, ": expected a delivery dtype float32, bfloat16 or float16, got ",
            delivery_.dtype);
  DPL_CHECK(delivery_.device.is_cpu() || delivery_.device.index < cuda_device_count(), op,
            ": expected a device that exists, got ", delivery_.device, "; this process sees ", cuda_device_count(),
            " GPU(s)");
  // A one-pixel image through the same normalisation on the host: its checks (counts, zero std)
  // fire here. The loader's channel count is checked against mean and std at the first batch.
  const int channels = static_cast<int>(std::max(mean_.size(), std_.size()));
  DPL_CHECK(channels <= kMaxNormalizeChannels, op, ": expected at most ", kMaxNormalizeChannels,
            " channels of mean and std, got ", channels);
  (void)normalize_images(Tensor::zeros({1, 1, 1, channels}, kUInt8), mean_, std_);
}

ImageBatchSource::~ImageBatchSource() = default;

std::unique_ptr<ImageBatchSource::InFlight> ImageBatchSource::start_copy(ImageBatch batch) const {
  auto f = std::make_unique<InFlight>();
  const TensorOptions device(kUInt8, delivery_.device);
  // Allocated before the copy group starts, so that the group's wait on the compute stream covers
  // the kernels of these blocks' previous owners.
  f->images = Tensor::empty({batch.size(), batch.height(), batch.width(), batch.channels()}, device);
  f->labels = Tensor::empty({batch.size()}, TensorOptions(kInt32, delivery_.device));
  f->copy = backend::SideStreamCopy(delivery_.device);
  f->batch = std::move(batch);
  f->copy.copy(f->batch.image_tensor(), f->images);
  f->copy.copy(f->batch.labels(), f->labels);
  return f;
}

void ImageBatchSource::count(const ImageBatch& batch) {
  const std::int64_t per_epoch = loader_->batches_per_epoch();
  ++iteration_;
  is_new_epoch_ = batch.index_in_epoch() + 1 == per_epoch;
  epoch_ = batch.epoch() + (is_new_epoch_ ? 1 : 0);
  epoch_detail_ = static_cast<double>(batch.epoch()) +
                  static_cast<double>(batch.index_in_epoch() + 1) / static_cast<double>(per_epoch);
}

Batch ImageBatchSource::next() {
  if (delivery_.device.is_cpu()) {
    ImageBatch b = loader_->next();
    // The labels live in the loader's reused buffer: copied out before the batch goes back.
    Batch batch{normalize_images(b.image_tensor(), mean_, std_, delivery_.dtype, delivery_.format),
                b.labels().clone()};
    count(b);
    return batch;
  }

  if (in_flight_ == nullptr) {
    // The first call, or the one after taking the next batch failed: that failure is this batch's.
    if (prefetch_error_) std::rethrow_exception(std::exchange(prefetch_error_, nullptr));
    in_flight_ = start_copy(loader_->next());
  }
  const std::unique_ptr<InFlight> current = std::move(in_flight_);
  current->copy.order_compute_after();
  Batch batch{normalize_images(current->images, mean_, std_, delivery_.dtype, delivery_.format), current->labels};
  count(current->batch);
  // The pinned buffer goes back before the next batch is taken, so that a loader with a single
  // buffer (prefetch 1) still works. The copy was queued one call ago and has normally finished.
  current->copy.wait();
  current->batch.release();
  // The next batch's copy runs on the copy stream while the caller trains on this one.
  try {
    in_flight_ = start_copy(loader_->next());
  } catch (...) {
    prefetch_error_ = std::current_exception();
  }
  return batch;
}

std::int64_t ImageBatchSource::global_batch() const {
  return loader_->options().batch_size * loader_->options().world_size;
}

GlobalDataState ImageBatchSource::global_state() const {
  const ImageLoaderOptions& o = loader_->options();
  const std::int64_t per_epoch = loader_->batches_per_epoch();
  GlobalDataState s;
  s.samples = loader_->size();
  s.global_batch = global_batch();
  s.epoch = iteration_ / per_epoch;
  s.iteration = iteration_;
  s.position = (iteration_ % per_epoch) * s.global_batch;
  s.is_new_epoch = is_new_epoch_;
  s.settings = {{"shuffle", o.shuffle ? "on" : "off"}, {"seed", std::to_string(o.seed)},
                {"drop last", o.drop_last ? "on" : "off"}};
  s.settings.insert(s.settings.end(), program_order_settings().begin(), program_order_settings().end());
  return s;
}

void ImageBatchSource::load_global_state(const GlobalDataState& s) {
  const char* op = "ImageBatchSource::load_global_state";
  check_same_data_order(s, global_state(), op);
  const std::int64_t per_epoch = loader_->batches_per_epoch();
  DPL_CHECK(s.iteration >= 0 && s.epoch == s.iteration / per_epoch &&
                s.position == (s.iteration % per_epoch) * s.global_batch &&
                s.is_new_epoch == (s.iteration > 0 && s.iteration % per_epoch == 0),
            op, ": the counters disagree: iteration ", s.iteration, " of ", per_epoch,
            " batches per epoch should be epoch ", s.iteration / per_epoch, " at position ",
            (s.iteration % per_epoch) * s.global_batch, ", got epoch ", s.epoch, " at position ", s.position,
            "; expected a state written by global_state()");
  // A batch already taken for the GPU belongs to the old position: dropped, its copy waited for.
  in_flight_.reset();
  prefetch_error_ = nullptr;
  loader_->restart_at(s.iteration);
  iteration_ = s.iteration;
  epoch_ = s.epoch;
  is_new_epoch_ = s.is_new_epoch;
  epoch_detail_ = static_cast<double>(s.iteration) / static_cast<double>(per_epoch);
}

}  // namespace dpl::data
