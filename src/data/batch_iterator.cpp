#include "dpl/data/batch_iterator.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <utility>

#include "core/stable_hash.hpp"
#include "data/rows.hpp"
#include "dpl/core/error.hpp"

namespace dpl::data {

BatchIterator::BatchIterator(Dataset dataset, std::int64_t batch_size, bool shuffle, std::uint64_t seed, bool repeat)
    : dataset_(std::move(dataset)),
      size_(dataset_.size()),
      batch_size_(batch_size),
      shuffle_(shuffle),
      seed_(seed),
      repeat_(repeat),
      gen_(seed) {
  DPL_CHECK(batch_size >= 1, "BatchIterator: expected batch_size >= 1, got ", batch_size);
  DPL_CHECK(size_ >= 1, "BatchIterator: expected a non-empty data set, got one of 0 samples");
  reset();
}

void BatchIterator::reset() {
  gen_.seed(seed_);
  position_ = 0;
  epoch_ = 0;
  iteration_ = 0;
  is_new_epoch_ = false;
  new_order();
}

void BatchIterator::new_order() {
  if (shuffle_) {
    order_ = permutation(size_, gen_);
  } else if (static_cast<std::int64_t>(order_.size()) != size_) {
    order_.resize(static_cast<std::size_t>(size_));
    std::iota(order_.begin(), order_.end(), std::int64_t{0});
  }
}

namespace {
constexpr const char* kContentSetting = "data set content";
}  // namespace

void BatchIterator::set_order_settings(std::vector<std::pair<std::string, std::string>> settings) {
  order_settings_ = std::move(settings);
}

std::vector<std::pair<std::string, std::string>> BatchIterator::order_settings() const {
  // The content, not only the size: shards cut with another seed, or another data folder, hold
  // as many samples as the ones saved.
  ::dpl::detail::StableHash h;
  h.add_bytes(dataset_.images().raw_data(), dataset_.images().nbytes());
  h.add_bytes(dataset_.labels().raw_data(), dataset_.labels().nbytes());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.value()));
  std::vector<std::pair<std::string, std::string>> out{{"shuffle", shuffle_ ? "on" : "off"}, {kContentSetting, hex}};
  out.insert(out.end(), order_settings_.begin(), order_settings_.end());
  return out;
}

BatchIteratorState BatchIterator::state() const {
  return {size_, batch_size_, epoch_, iteration_, position_, is_new_epoch_, order_, gen_.state(), order_settings()};
}

namespace {
// Each setting of saved and now that differs (or is on one side only), as the message words it.
std::string settings_differences(const std::vector<std::pair<std::string, std::string>>& saved,
                                 const std::vector<std::pair<std::string, std::string>>& now) {
  const auto find = [](const std::vector<std::pair<std::string, std::string>>& list, const std::string& name) {
    const auto it = std::find_if(list.begin(), list.end(), [&](const auto& kv) { return kv.first == name; });
    return it == list.end() ? std::string("(not recorded)") : it->second;
  };
  std::vector<std::string> names;
  for (const auto* list : {&saved, &now})
    for (const auto& kv : *list)
      if (std::find(names.begin(), names.end(), kv.first) == names.end()) names.push_back(kv.first);
  std::string out;
  for (const std::string& name : names) {
    const std::string was = find(saved, name), is = find(now, name);
    if (was == is) continue;
    out += out.empty() ? "" : "; ";
    // A hash of each rank's own shard: its value differs by rank and says nothing to a reader.
    out += name == kContentSetting ? "the data set's content differs from the one saved (same size, another hash)"
                                   : ::dpl::detail::concat("setting '", name, "' was ", was, " when saved, is ", is, " now");
  }
  return out;
}
}  // namespace

void BatchIterator::load_state(const BatchIteratorState& s) {
  const char* who = "BatchIterator::load_state";
  DPL_CHECK(s.dataset_size == size_, who, ": the state is of a data set of ", s.dataset_size,
            " samples, this iterator's has ", size_);
  DPL_CHECK(s.batch_size == batch_size_, who, ": the state is of batches of ", s.batch_size,
            ", this iterator's are of ", batch_size_);
  DPL_CHECK(s.epoch >= 0 && s.iteration >= 0, who, ": expected epoch and iteration >= 0, got ", s.epoch, " and ",
            s.iteration);
  DPL_CHECK(s.position >= 0 && s.position < size_, who, ": expected a position in [0, ", size_, "), got ",
            s.position);
  DPL_CHECK(static_cast<std::int64_t>(s.order.size()) == size_, who, ": expected an order of ", size_,
            " samples, got ", s.order.size());
  if (!s.settings.empty()) {
    const std::string differences = settings_differences(s.settings, order_settings());
    DPL_CHECK(differences.empty(), who, ": the data or their order differ from the run that saved the state: ",
              differences, "; resume with the settings and data the run was saved with");
  }
  std::vector<bool> seen(static_cast<std::size_t>(size_), false);
  for (std::size_t i = 0; i < s.order.size(); ++i) {
    const std::int64_t k = s.order[i];
    DPL_CHECK(k >= 0 && k < size_ && !seen[static_cast<std::size_t>(k)], who,
              ": expected the order to be a permutation of 0..", size_ - 1, ", got ", k, " at position ", i,
              k >= 0 && k < size_ ? " a second time" : "");
    seen[static_cast<std::size_t>(k)] = true;
  }
  Generator gen = gen_;
  gen.set_state(s.generator);
  gen_ = gen;
  order_ = s.order;
  epoch_ = s.epoch;
  iteration_ = s.iteration;
  position_ = s.position;
  is_new_epoch_ = s.is_new_epoch;
}

BatchIterator::Buffers& BatchIterator::free_buffers() {
  // A use count of one means only this iterator views the storage, so overwriting it cannot
  // change a batch the caller still holds.
  auto is_free = [](const Buffers& b) { return b.x.storage().use_count() == 1 && b.y.storage().use_count() == 1; };
  for (Buffers& b : buffers_) {
    if (is_free(b)) return b;
  }
  Shape s{batch_size_};
  const Shape sample = dataset_.sample_shape();
  s.insert(s.end(), sample.begin(), sample.end());
  Buffers fresh{Tensor::empty(s, kFloat32), Tensor::empty({batch_size_}, kInt32)};
  constexpr std::size_t kSlots = 2;
  if (buffers_.size() < kSlots) {
    buffers_.push_back(std::move(fresh));
    return buffers_.back();
  }
  // Every slot is held by the caller: replace one; its old storage lives on with the caller.
  Buffers& slot = buffers_[static_cast<std::size_t>(iteration_ % static_cast<std::int64_t>(kSlots))];
  slot = std::move(fresh);
  return slot;
}

Batch BatchIterator::next() {
  DPL_CHECK(has_next(), "BatchIterator::next: the iterator is exhausted: repeat is off and its epoch ended at "
                        "iteration ", iteration_, "; call reset() to start over");
  const std::int64_t n = repeat_ ? batch_size_ : std::min(batch_size_, size_ - position_);
  Buffers& buf = free_buffers();
  float* x = buf.x.data<float>();
  std::int32_t* y = buf.y.data<std::int32_t>();
  const std::int64_t row = dataset_.sample_numel();

  is_new_epoch_ = false;
  std::int64_t filled = 0;
  while (filled < n) {
    const std::int64_t take = std::min(n - filled, size_ - position_);
    detail::copy_rows(dataset_, order_.data() + position_, take, x + filled * row, y + filled);
    filled += take;
    position_ += take;
    if (position_ == size_) {
      // The batch that reaches the end of the order closes the epoch; with repeat it goes on
      // filling from the next epoch's fresh order.
      ++epoch_;
      is_new_epoch_ = true;
      position_ = 0;
      if (!repeat_) break;
      new_order();
    }
  }
  ++iteration_;
  if (n == batch_size_) return Batch{buf.x, buf.y};
  return Batch{buf.x.narrow(0, 0, n), buf.y.narrow(0, 0, n)};
}

}  // namespace dpl::data
