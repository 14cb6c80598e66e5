#include "dpl/data/image/image_batch_source.hpp"

#include <algorithm>
#include <utility>

#include "dpl/core/error.hpp"

namespace dpl::data {

ImageBatchSource::ImageBatchSource(std::unique_ptr<ImageLoader> loader, std::vector<float> mean,
                                   std::vector<float> std)
    : loader_(std::move(loader)), mean_(std::move(mean)), std_(std::move(std)) {
  DPL_CHECK(loader_ != nullptr, "ImageBatchSource: expected an image loader, got null");
  DPL_CHECK(!mean_.empty() && !std_.empty(), "ImageBatchSource: expected a mean and a std (one value per channel, "
            "or one for all), got ", mean_.size(), " and ", std_.size(), " values");
  // A one-pixel image through the same normalisation: its checks (counts, zero std) fire here.
  const std::uint8_t pixel[4] = {0, 0, 0, 0};
  const int channels = static_cast<int>(std::max(mean_.size(), std_.size()));
  DPL_CHECK(channels <= 4, "ImageBatchSource: expected at most 4 channels of mean and std, got ", channels);
  (void)normalize_to_float(pixel, 1, 1, 1, channels, mean_, std_);
}

Batch ImageBatchSource::next() {
  ImageBatch b = loader_->next();
  // The labels live in the loader's reused (possibly pinned) buffer: copied out before release.
  Batch batch{b.to_float(mean_, std_), b.labels().clone()};
  epoch_ = b.epoch() + (loader_->is_new_epoch() ? 1 : 0);
  epoch_detail_ = static_cast<double>(b.epoch()) +
                  static_cast<double>(b.index_in_epoch() + 1) / static_cast<double>(loader_->batches_per_epoch());
  return batch;
}

}  // namespace dpl::data
