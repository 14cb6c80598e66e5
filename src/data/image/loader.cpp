#include "dpl/data/image/loader.hpp"

#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "dpl/core/cuda.hpp"
#include "dpl/core/device.hpp"
#include "dpl/core/error.hpp"
#include "dpl/tensor/storage.hpp"

namespace dpl::data {

Tensor ImageBatch::image_tensor() const {
  DPL_CHECK(size_ > 0, "ImageBatch::image_tensor: the batch is empty");
  // A storage that frees nothing: it only keeps the lease, and with it the buffer, alive.
  auto storage = std::make_shared<Storage>(const_cast<std::uint8_t*>(images_), image_bytes(), Device::cpu(),
                                           [lease = lease_](void*) {});
  return Tensor(std::move(storage), 0, {size_, height_, width_, channels_},
                contiguous_strides({size_, height_, width_, channels_}), kUInt8);
}

Tensor ImageBatch::to_float(const std::vector<float>& mean, const std::vector<float>& std) const {
  DPL_CHECK(size_ > 0, "ImageBatch::to_float: the batch is empty");
  return normalize_to_float(images_, size_, height_, width_, channels_, mean, std);
}

namespace {

// Host memory for a batch buffer: page-locked from dpl's cache when asked and a GPU is there,
// 64-byte aligned ordinary memory otherwise.
std::shared_ptr<Storage> host_buffer(std::size_t nbytes, bool pinned) {
  if (pinned) return std::make_shared<Storage>(cuda::pinned_allocate(nbytes), nbytes, Device::cpu(), cuda::pinned_free);
  return Storage::allocate(nbytes, Device::cpu());
}

}  // namespace

// Everything the workers and the handed-out batches share. Batches keep it alive through their
// lease, so their buffers survive the loader.
struct ImageLoader::State {
  // One batch buffer. Batch b always uses slot b % prefetch, so batches complete into slots in
  // order and the caller takes them in order.
  struct Slot {
    enum class Phase { kFree, kFilling, kReady, kHeld };
    std::shared_ptr<Storage> pixels;
    Tensor labels;
    Phase phase = Phase::kFree;
    std::int64_t batch = -1;     // batch number (over all epochs) it holds or is filling
    std::int64_t count = 0;      // examples in that batch
    std::int64_t remaining = 0;  // examples not yet finished
    std::shared_ptr<const std::vector<std::int64_t>> order;  // that batch's epoch order
    std::vector<char> failed;    // skip_bad: which examples failed
    std::vector<std::string> reasons;  // skip_bad: their messages
    std::exception_ptr error;    // the failure of the lowest-placed example, without skip_bad
    std::int64_t error_pos = -1;
  };

  std::shared_ptr<const RandomAccessDataset> dataset;
  std::vector<std::int64_t> indices;
  ImageTransform transform;
  ImageLoaderOptions options;
  std::int64_t per_epoch = 0;     // batches per epoch
  std::size_t sample_bytes = 0;
  bool pinned = false;

  std::mutex mutex;
  std::condition_variable work_cv;   // workers: a slot became free, or stop
  std::condition_variable ready_cv;  // caller: a batch is complete
  std::vector<Slot> slots;
  std::map<std::int64_t, std::shared_ptr<const std::vector<std::int64_t>>> orders;  // by epoch
  bool stop = false;
  std::int64_t fill_batch = -1;  // the batch whose examples are being handed out
  std::int64_t first_batch = 0;  // the batch to start with when none is being handed out
  std::int64_t fill_next = 0;    // its next example position
  std::int64_t consumed = 0;     // batches returned by next()
  std::exception_ptr broken;     // the error next() threw; thrown again by every later call
  std::int64_t skipped = 0;
  std::map<std::int64_t, SkippedExamples> skipped_by_epoch;  // of the batches returned
  SkippedExamples skipped_in_run;
  std::vector<std::thread> workers;

  std::int64_t global_batch() const { return options.batch_size * options.world_size; }
  // Where this process's share of a batch starts in its epoch's order.
  std::int64_t batch_start(std::int64_t batch) const {
    return (batch % per_epoch) * global_batch() + options.rank * options.batch_size;
  }
  std::int64_t batch_count(std::int64_t batch) const {
    const auto n = static_cast<std::int64_t>(indices.size());
    return std::min(options.batch_size, n - batch_start(batch));
  }

  // The order of an epoch, drawn once; orders of epochs no slot can still need are dropped.
  std::shared_ptr<const std::vector<std::int64_t>> order_of(std::int64_t epoch) {
    auto it = orders.find(epoch);
    if (it != orders.end()) return it->second;
    auto order = std::make_shared<std::vector<std::int64_t>>(indices);
    if (options.shuffle) {
      Generator gen = sample_generator(options.seed, epoch, -1);
      const std::vector<std::int64_t> p = permutation(static_cast<std::int64_t>(indices.size()), gen);
      for (std::size_t i = 0; i < p.size(); ++i) (*order)[i] = indices[static_cast<std::size_t>(p[i])];
    }
    while (!orders.empty() && orders.begin()->first < epoch - 1) orders.erase(orders.begin());
    orders.emplace(epoch, order);
    return order;
  }

  void work() {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      if (stop) return;
      if (fill_batch < 0 || fill_next == slots[static_cast<std::size_t>(fill_batch % slots.size())].count) {
        // The current batch is handed out: start the next one when its slot is free.
        const std::int64_t b = fill_batch < 0 ? first_batch : fill_batch + 1;
        Slot& s = slots[static_cast<std::size_t>(b % static_cast<std::int64_t>(slots.size()))];
        if (s.phase != Slot::Phase::kFree) {
          work_cv.wait(lock);
          continue;
        }
        s.phase = Slot::Phase::kFilling;
        s.batch = b;
        s.count = batch_count(b);
        s.remaining = s.count;
        s.order = order_of(b / per_epoch);
        s.failed.assign(static_cast<std::size_t>(s.count), 0);
        s.reasons.assign(static_cast<std::size_t>(s.count), std::string());
        s.error = nullptr;
        s.error_pos = -1;
        fill_batch = b;
        fill_next = 0;
      }
      Slot& s = slots[static_cast<std::size_t>(fill_batch % static_cast<std::int64_t>(slots.size()))];
      const std::int64_t pos = fill_next++;
      const std::int64_t epoch = s.batch / per_epoch;
      const std::int64_t index = (*s.order)[static_cast<std::size_t>(batch_start(s.batch) + pos)];
      std::uint8_t* dst = static_cast<std::uint8_t*>(s.pixels->data()) + static_cast<std::size_t>(pos) * sample_bytes;
      lock.unlock();

      // The slot cannot be reused before this example is finished (remaining > 0), so it is
      // written without the lock.
      std::exception_ptr error;
      std::string reason;
      try {
        s.labels.data<std::int32_t>()[pos] = transform_example(*dataset, index, transform, options.seed, epoch, dst);
      } catch (const std::exception& e) {
        error = std::current_exception();
        reason = e.what();
      } catch (...) {
        error = std::current_exception();
        reason = "an exception that is not a std::exception";
      }

      lock.lock();
      if (error) {
        if (options.skip_bad) {
          s.failed[static_cast<std::size_t>(pos)] = 1;
          s.reasons[static_cast<std::size_t>(pos)] = std::move(reason);
        } else if (s.error_pos < 0 || pos < s.error_pos) {
          // The lowest position's error, so which error is reported does not depend on timing.
          s.error = error;
          s.error_pos = pos;
        }
      }
      if (--s.remaining == 0) {
        s.phase = Slot::Phase::kReady;
        ready_cv.notify_all();
      }
    }
  }

  // skip_bad: counts the slot's failed examples and keeps the first messages. Called with the
  // lock held, as the batch is returned, so the reports follow the order of the batches.
  void count_skips(const Slot& s) {
    const std::int64_t epoch = s.batch / per_epoch;
    SkippedExamples& in_epoch = skipped_by_epoch[epoch];
    for (std::size_t i = 0; i < s.failed.size(); ++i) {
      if (!s.failed[i]) continue;
      ++skipped;
      for (SkippedExamples* r : {&in_epoch, &skipped_in_run}) {
        ++r->count;
        if (r->first.size() < kSkipReasonsKept) r->first.push_back(s.reasons[i]);
      }
    }
  }

  // keep_batch_size: copies into each failed position the next example after it that loaded
  // (wrapping round); returns the batch's size, or throws when no example of it loaded.
  std::int64_t fill_in(Slot& s) const {
    auto* px = static_cast<std::uint8_t*>(s.pixels->data());
    std::int32_t* lab = s.labels.data<std::int32_t>();
    const auto n = static_cast<std::size_t>(s.count);
    for (std::size_t i = 0; i < n; ++i) {
      if (!s.failed[i]) continue;
      std::size_t from = (i + 1) % n;
      while (from != i && s.failed[from]) from = (from + 1) % n;
      DPL_CHECK(from != i, "ImageLoader: every one of the ", s.count, " examples of batch ", s.batch % per_epoch,
                " of epoch ", s.batch / per_epoch, " failed to load, so none can stand in for the others; the first: ",
                s.reasons[0]);
      std::memcpy(px + i * sample_bytes, px + from * sample_bytes, sample_bytes);
      lab[i] = lab[from];
    }
    return s.count;
  }

  // skip_bad: moves the examples that loaded to the front of the slot; returns how many.
  std::int64_t compact(Slot& s) const {
    std::int64_t kept = 0;
    auto* px = static_cast<std::uint8_t*>(s.pixels->data());
    std::int32_t* lab = s.labels.data<std::int32_t>();
    for (std::int64_t i = 0; i < s.count; ++i) {
      if (s.failed[static_cast<std::size_t>(i)]) continue;
      if (kept != i) {
        std::memmove(px + kept * sample_bytes, px + i * sample_bytes, sample_bytes);
        lab[kept] = lab[i];
      }
      ++kept;
    }
    return kept;
  }

  void release(std::size_t slot) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      slots[slot].phase = Slot::Phase::kFree;
    }
    work_cv.notify_all();
  }

  void start_workers() {
    try {
      for (int i = 0; i < options.workers; ++i) workers.emplace_back([this] { work(); });
    } catch (...) {
      shut_down();
      throw;
    }
  }

  void shut_down() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    work_cv.notify_all();
    for (std::thread& t : workers)
      if (t.joinable()) t.join();
    workers.clear();
  }
};

ImageLoader::ImageLoader(std::shared_ptr<const RandomAccessDataset> dataset, ImageTransform transform,
                         ImageLoaderOptions options)
    : ImageLoader(dataset, [&] {
        DPL_CHECK(dataset != nullptr, "ImageLoader: the data set is null");
        std::vector<std::int64_t> all(static_cast<std::size_t>(dataset->size()));
        for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
        return all;
      }(), transform, options) {}

ImageLoader::ImageLoader(std::shared_ptr<const RandomAccessDataset> dataset, std::vector<std::int64_t> indices,
                         ImageTransform transform, ImageLoaderOptions options)
    : state_(std::make_shared<State>()) {
  const char* op = "ImageLoader";
  DPL_CHECK(dataset != nullptr, op, ": the data set is null");
  DPL_CHECK(!indices.empty(), op, ": expected a non-empty list of indices, got an empty one");
  DPL_CHECK(options.batch_size >= 1, op, ": expected batch_size >= 1, got ", options.batch_size);
  DPL_CHECK(options.workers >= 1, op, ": expected workers (-j) >= 1, got ", options.workers);
  DPL_CHECK(options.prefetch >= 1, op, ": expected prefetch >= 1, got ", options.prefetch);
  DPL_CHECK(transform.size >= 1, op, ": expected a crop size >= 1, got ", transform.size);
  DPL_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size, op,
            ": expected world_size >= 1 and a rank in [0, world_size), got rank ", options.rank, " of ",
            options.world_size);
  DPL_CHECK(options.world_size == 1 || options.drop_last, op, ": splitting each global batch among ",
            options.world_size, " processes requires drop_last, so that every process has a full share of every "
            "batch");
  for (std::size_t i = 0; i < indices.size(); ++i)
    DPL_CHECK(indices[i] >= 0 && indices[i] < dataset->size(), op, ": index ", indices[i], " at position ", i,
              " is outside a data set of ", dataset->size(), " examples");
  const auto n = static_cast<std::int64_t>(indices.size());
  const std::int64_t global = options.batch_size * options.world_size;
  const std::string processes =
      options.world_size > 1 ? ::dpl::detail::concat(" x ", options.world_size, " processes") : std::string();
  DPL_CHECK(!options.drop_last || n >= global, op, ": drop_last with ", n, " indices and batch_size ",
            options.batch_size, processes, " leaves no batch; expected at least one full batch");

  State& st = *state_;
  st.dataset = std::move(dataset);
  st.indices = std::move(indices);
  st.transform = transform;
  st.options = options;
  st.per_epoch = options.drop_last ? n / global : (n + global - 1) / global;
  st.sample_bytes = static_cast<std::size_t>(transform.size) * static_cast<std::size_t>(transform.size) *
                    static_cast<std::size_t>(st.dataset->channels());
  st.pinned = options.pin_memory && cuda_is_available();
  st.slots.resize(static_cast<std::size_t>(options.prefetch));
  for (State::Slot& s : st.slots) {
    s.pixels = host_buffer(st.sample_bytes * static_cast<std::size_t>(options.batch_size), st.pinned);
    auto labels = host_buffer(sizeof(std::int32_t) * static_cast<std::size_t>(options.batch_size), st.pinned);
    s.labels = Tensor(labels, 0, {options.batch_size}, {1}, kInt32);
  }
  st.start_workers();
}

ImageLoader::~ImageLoader() { state_->shut_down(); }

ImageBatch ImageLoader::next() {
  State& st = *state_;
  std::unique_lock<std::mutex> lock(st.mutex);
  if (st.broken) std::rethrow_exception(st.broken);
  const std::int64_t b = st.consumed;
  const auto slot = static_cast<std::size_t>(b % static_cast<std::int64_t>(st.slots.size()));
  State::Slot& s = st.slots[slot];
  // Batch b needs the buffer of batch b - prefetch; if the caller still holds that one, waiting
  // would never end.
  DPL_CHECK(!(s.phase == State::Slot::Phase::kHeld && s.batch != b), "ImageLoader::next: all ", st.slots.size(),
            " batch buffers are held by the caller (batch ", s.batch,
            " is still alive); drop or release() a batch before asking for the next, or raise prefetch");
  st.ready_cv.wait(lock, [&] { return s.batch == b && s.phase == State::Slot::Phase::kReady; });
  if (s.error) {
    st.broken = s.error;
    s.phase = State::Slot::Phase::kHeld;  // keeps the workers from refilling it: the loader is done
    lock.unlock();
    st.shut_down();
    std::rethrow_exception(st.broken);
  }
  std::int64_t count = s.count;
  if (st.options.skip_bad) {
    st.count_skips(s);
    try {
      count = st.options.keep_batch_size ? st.fill_in(s) : st.compact(s);
    } catch (...) {
      st.broken = std::current_exception();
      s.phase = State::Slot::Phase::kHeld;
      lock.unlock();
      st.shut_down();
      throw;
    }
  }
  s.phase = State::Slot::Phase::kHeld;
  ++st.consumed;

  ImageBatch batch;
  std::shared_ptr<State> keep = state_;
  batch.lease_ = std::shared_ptr<void>(nullptr, [keep, slot](void*) { keep->release(slot); });
  batch.images_ = static_cast<const std::uint8_t*>(s.pixels->data());
  batch.labels_ = s.labels.narrow(0, 0, count);
  batch.size_ = count;
  batch.height_ = st.transform.size;
  batch.width_ = st.transform.size;
  batch.channels_ = st.dataset->channels();
  batch.pinned_ = st.pinned;
  batch.epoch_ = b / st.per_epoch;
  batch.index_in_epoch_ = b % st.per_epoch;
  return batch;
}

void ImageLoader::restart_at(std::int64_t batch) {
  State& st = *state_;
  const char* op = "ImageLoader::restart_at";
  DPL_CHECK(batch >= 0, op, ": expected a batch >= 0, got ", batch);
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    DPL_CHECK(!st.broken, op, ": the loader has failed (an example that did not load); make a new one");
    for (const State::Slot& s : st.slots)
      DPL_CHECK(s.phase != State::Slot::Phase::kHeld, op, ": batch ", s.batch,
                " is still held by the caller; release every batch first");
  }
  st.shut_down();
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    st.stop = false;
    for (State::Slot& s : st.slots) {
      s.phase = State::Slot::Phase::kFree;
      s.batch = -1;
      s.order.reset();
    }
    st.orders.clear();
    st.fill_batch = -1;
    st.fill_next = 0;
    st.first_batch = batch;
    st.consumed = batch;
  }
  st.start_workers();
}

std::int64_t ImageLoader::batches_per_epoch() const { return state_->per_epoch; }

std::int64_t ImageLoader::size() const { return static_cast<std::int64_t>(state_->indices.size()); }

const ImageLoaderOptions& ImageLoader::options() const { return state_->options; }

std::int64_t ImageLoader::iteration() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->consumed;
}

std::int64_t ImageLoader::epoch() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->consumed == 0 ? 0 : (state_->consumed - 1) / state_->per_epoch;
}

bool ImageLoader::is_new_epoch() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->consumed > 0 && state_->consumed % state_->per_epoch == 0;
}

std::int64_t ImageLoader::skipped() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->skipped;
}

SkippedExamples ImageLoader::skipped_report(std::int64_t epoch) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (epoch < 0) return state_->skipped_in_run;
  const auto it = state_->skipped_by_epoch.find(epoch);
  return it == state_->skipped_by_epoch.end() ? SkippedExamples{} : it->second;
}

bool ImageLoader::pinned() const { return state_->pinned; }

}  // namespace dpl::data
