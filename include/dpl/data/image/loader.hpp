#pragma once
// A multi-threaded batch loader for image data sets: worker threads decode and transform
// examples into 8-bit NHWC batches held in pinned host memory, several batches ahead of the
// training loop.
//
// Layout: a batch's images are packed (N, H, W, C) uint8, C = 3 for RGB (ImageBatch::image_tensor
// is that tensor). This is what travels to the device, as one contiguous transfer of a quarter of
// float32's bytes; normalize_images turns it into (N, C, H, W) floats there, in channels-last order
// without a transpose (Tensor::empty_channels_last has the same element order) or as NCHW.
// normalize_to_float is its CPU reference.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dpl/data/image/transforms.hpp"
#include "dpl/data/random_access_dataset.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::data {

/// One batch from an ImageLoader. A handle: copies share the batch, and its buffers are not
/// rewritten by the loader until every copy is gone (or release() was called on each), so an
/// asynchronous device copy from images() stays valid for as long as the caller keeps the batch.
/// The buffers may outlive the loader.
class ImageBatch {
 public:
  /// An empty batch (size() == 0, images() null).
  ImageBatch() = default;

  /// Number of images N (0 for an empty batch). A batch may be shorter than the loader's batch
  /// size: the last batch of an epoch (without drop_last) and batches from which skip_bad removed
  /// samples.
  std::int64_t size() const { return size_; }
  int height() const { return height_; }
  int width() const { return width_; }
  int channels() const { return channels_; }
  /// size() * height() * width() * channels() bytes of packed NHWC images. Page-locked (pinned)
  /// when pinned() is true, so a device copy from it can run asynchronously.
  const std::uint8_t* images() const { return images_; }
  /// Bytes behind images().
  std::size_t image_bytes() const {
    return static_cast<std::size_t>(size_) * static_cast<std::size_t>(height_) * static_cast<std::size_t>(width_) *
           static_cast<std::size_t>(channels_);
  }
  /// Labels, (N,) int32 on the host (in pinned memory when pinned()).
  const Tensor& labels() const { return labels_; }
  /// Whether images() and labels() are page-locked.
  bool pinned() const { return pinned_; }
  /// The epoch this batch belongs to (0-based) and its position in that epoch.
  std::int64_t epoch() const { return epoch_; }
  std::int64_t index_in_epoch() const { return index_in_epoch_; }
  /// The images as a uint8 (N, H, W, C) host tensor over the batch's buffer (no copy; page-locked
  /// when pinned()). The tensor holds the buffer like a copy of the batch does: the loader does not
  /// rewrite it while the tensor lives. Requires a non-empty batch.
  Tensor image_tensor() const;
  /// The images as float32 (N, C, H, W) channels-last, (x - mean[c]) / std[c]: normalize_to_float.
  Tensor to_float(const std::vector<float>& mean, const std::vector<float>& std) const;
  /// Gives the buffers back to the loader now; the batch becomes empty.
  void release() { *this = ImageBatch(); }

 private:
  friend class ImageLoader;
  std::shared_ptr<void> lease_;  // returns the buffers to the loader when the last copy goes
  const std::uint8_t* images_ = nullptr;
  Tensor labels_;
  std::int64_t size_ = 0;
  int height_ = 0, width_ = 0, channels_ = 0;
  bool pinned_ = false;
  std::int64_t epoch_ = 0, index_in_epoch_ = 0;
};

/// How an ImageLoader draws and prepares batches.
struct ImageLoaderOptions {
  std::int64_t batch_size = 32;  ///< images per batch, >= 1
  int workers = 1;               ///< threads that decode and transform (-j), >= 1
  int prefetch = 2;              ///< batch buffers: batches prepared ahead of the caller, >= 1
  bool shuffle = true;           ///< a fresh permutation of the indices every epoch
  std::uint64_t seed = 0;        ///< seeds the shuffles and every sample's crop and flip
  bool drop_last = false;        ///< leave out an epoch's final short batch
  bool skip_bad = false;         ///< leave out examples that fail to load (counted) instead of failing
  /// With skip_bad: put in the place of each example that failed a copy of one that loaded from
  /// the same batch (the next one after it, wrapping round), so every batch keeps its size: ranks
  /// then keep stepping on equal batches, and the learning rate scaled for the batch still fits.
  /// A batch in which every example failed is then an error. Without it they are left out, and
  /// such a batch comes back empty (which ImageBatchSource refuses to deliver).
  bool keep_batch_size = false;
  bool pin_memory = true;        ///< page-locked buffers when a GPU is available
  /// This process among world_size that share each global batch of batch_size · world_size
  /// examples: it takes examples [rank · batch_size, (rank + 1) · batch_size) of each. The
  /// global batches, and each example's crop and flip, are then the same on any number of
  /// processes with the same global batch. world_size > 1 requires drop_last (every process then
  /// has a full share of every global batch).
  int rank = 0;
  int world_size = 1;
};

/// The examples an ImageLoader skipped (skip_bad) in the batches it returned: how many, and the
/// error messages of the first few (the data set's, e.g. "train.txt:12: a.jpg: corrupt or
/// truncated JPEG: ...") in the order of the batches and of the examples within each.
struct SkippedExamples {
  std::int64_t count = 0;
  std::vector<std::string> first;  ///< at most ImageLoader::kSkipReasonsKept messages
};

/// Serves batches of transformed images from a data set, for ever, epoch after epoch.
///
/// An epoch visits each of the given indices exactly once, in a new order each epoch when shuffle
/// is on: the permutation is drawn from a generator seeded by (seed, epoch). The indices are a
/// rank's own shard, or, with ImageLoaderOptions::world_size > 1, the whole job's, of which each
/// global batch is split among the processes.
/// Every sample's crop and flip come from sample_generator(seed, epoch, index), so the batches are
/// the same whatever the number of workers. Workers fill up to `prefetch` batches ahead; they
/// stop when every buffer is full or held by the caller.
///
/// Errors: an example that fails to load fails the batch it belongs to; next() rethrows that
/// error (the data set's dpl::Error, e.g. "train.txt:12: cannot open a.jpg: No such file or
/// directory") when the caller reaches that batch, and every later call rethrows it again. With
/// skip_bad, failed examples are left out of their batch (or, with keep_batch_size, replaced by
/// a copy of another example of it) and counted in skipped() instead.
class ImageLoader {
 public:
  /// How many skip messages skipped_report() keeps, per epoch and for the whole run.
  static constexpr std::size_t kSkipReasonsKept = 5;

  /// Loads the examples at `indices` of dataset (each in [0, dataset->size())).
  /// Requires: a dataset, a non-empty index list, options in range, and with drop_last at least
  /// one full batch; throws dpl::Error naming the option or the first bad index otherwise.
  /// Starts the worker threads, which begin filling the first batches at once.
  ImageLoader(std::shared_ptr<const RandomAccessDataset> dataset, std::vector<std::int64_t> indices,
              ImageTransform transform, ImageLoaderOptions options);
  /// Loads every example of dataset (indices 0..size()-1).
  ImageLoader(std::shared_ptr<const RandomAccessDataset> dataset, ImageTransform transform, ImageLoaderOptions options);
  /// Stops the workers (each finishes the example it is preparing) and joins them. Batches the
  /// caller still holds stay valid.
  ~ImageLoader();
  ImageLoader(const ImageLoader&) = delete;
  ImageLoader& operator=(const ImageLoader&) = delete;

  /// The next batch, waiting for it if it is not ready. Throws the error of an example of this
  /// batch that failed to load (see the class comment), and dpl::Error when the caller still holds
  /// the batch whose buffer this one needs (more than `prefetch` batches held at once).
  ImageBatch next();

  /// Makes batch `batch` (counted over all epochs from 0) the next one next() returns, as if the
  /// loader had returned the batches before it: stops the workers (each finishes the example it
  /// is preparing), forgets what they prepared, and starts them at that batch. For resuming a run
  /// (ImageBatchSource::load_global_state). Requires batch >= 0, no batch held by the caller and a
  /// loader that has not failed; throws dpl::Error otherwise.
  void restart_at(std::int64_t batch);

  /// Batches in one epoch: ceil(n / g), or floor with drop_last, for n indices and the global
  /// batch g = batch_size · world_size.
  std::int64_t batches_per_epoch() const;
  /// The number of indices an epoch visits.
  std::int64_t size() const;
  /// The options given at construction.
  const ImageLoaderOptions& options() const;
  /// Batches returned so far.
  std::int64_t iteration() const;
  /// The epoch of the last batch returned (0 before the first).
  std::int64_t epoch() const;
  /// True when the last batch returned was its epoch's last.
  bool is_new_epoch() const;
  /// Examples left out (or replaced) because they failed to load, in the batches returned so far
  /// (skip_bad only).
  std::int64_t skipped() const;
  /// The examples skipped in the batches of `epoch` returned so far (0-based), or, for epoch -1,
  /// in all of them; see SkippedExamples.
  SkippedExamples skipped_report(std::int64_t epoch = -1) const;
  /// Whether the batch buffers are page-locked.
  bool pinned() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace dpl::data
