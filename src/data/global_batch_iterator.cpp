#include "dpl/data/global_batch_iterator.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "core/stable_hash.hpp"
#include "data/rows.hpp"
#include "dpl/core/error.hpp"

namespace dpl::data {

namespace {
constexpr const char* kOp = "GlobalBatchIterator";
}  // namespace

GlobalBatchIterator::GlobalBatchIterator(Dataset dataset, std::int64_t global_batch, int rank, int world_size,
                                         bool shuffle, std::uint64_t seed)
    : dataset_(std::move(dataset)),
      global_batch_(global_batch),
      rank_(rank),
      world_size_(world_size),
      shuffle_(shuffle),
      seed_(seed) {
  DPL_CHECK(dataset_.size() >= 1, kOp, ": expected a non-empty data set, got one of 0 samples");
  DPL_CHECK(rank >= 0 && rank < world_size, kOp, ": expected a rank in [0, ", world_size, "), got ", rank);
  per_process_batch(global_batch, world_size, kOp);
  // The content, not only the size: another data folder may hold as many samples.
  ::dpl::detail::StableHash h;
  h.add_bytes(dataset_.images().raw_data(), dataset_.images().nbytes());
  h.add_bytes(dataset_.labels().raw_data(), dataset_.labels().nbytes());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.value()));
  content_hash_ = hex;
}

std::int64_t GlobalBatchIterator::sample_at(std::int64_t stream_index) {
  const std::int64_t n = dataset_.size();
  const std::int64_t e = epoch_ + stream_index / n;
  auto it = std::find_if(orders_.begin(), orders_.end(), [e](const auto& o) { return o.first == e; });
  if (it == orders_.end()) {
    // Orders of finished epochs are no longer needed.
    orders_.erase(std::remove_if(orders_.begin(), orders_.end(), [this](const auto& o) { return o.first < epoch_; }),
                  orders_.end());
    orders_.emplace_back(e, global_epoch_order(n, shuffle_, seed_, e));
    it = orders_.end() - 1;
  }
  return it->second[static_cast<std::size_t>(stream_index % n)];
}

Batch GlobalBatchIterator::next() {
  const std::int64_t b = batch_size();
  std::vector<std::int64_t> indices(static_cast<std::size_t>(b));
  const std::int64_t first = position_ + static_cast<std::int64_t>(rank_) * b;
  for (std::int64_t j = 0; j < b; ++j) indices[static_cast<std::size_t>(j)] = sample_at(first + j);
  Shape shape{b};
  const Shape sample = dataset_.sample_shape();
  shape.insert(shape.end(), sample.begin(), sample.end());
  Batch batch{Tensor::empty(shape, kFloat32), Tensor::empty({b}, kInt32)};
  detail::copy_rows(dataset_, indices.data(), b, batch.x.data<float>(), batch.y.data<std::int32_t>());

  advance_global_position(dataset_.size(), global_batch_, epoch_, position_, is_new_epoch_, iteration_);
  return batch;
}

GlobalDataState GlobalBatchIterator::global_state() const {
  GlobalDataState s;
  s.samples = dataset_.size();
  s.global_batch = global_batch_;
  s.epoch = epoch_;
  s.iteration = iteration_;
  s.position = position_;
  s.is_new_epoch = is_new_epoch_;
  s.settings = {
      {"shuffle", shuffle_ ? "on" : "off"}, {"seed", std::to_string(seed_)}, {"data set content", content_hash_}};
  s.settings.insert(s.settings.end(), program_order_settings().begin(), program_order_settings().end());
  return s;
}

void GlobalBatchIterator::load_global_state(const GlobalDataState& s) {
  const char* op = "GlobalBatchIterator::load_global_state";
  check_same_data_order(s, global_state(), op);
  check_global_position(dataset_.size(), global_batch_, s.epoch, s.position, s.iteration, op, "samples", "global_state()");
  epoch_ = s.epoch;
  position_ = s.position;
  iteration_ = s.iteration;
  is_new_epoch_ = s.is_new_epoch;
  orders_.clear();
}

}  // namespace dpl::data
