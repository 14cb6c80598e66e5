#include "dpl/data/token_loader.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "core/stable_hash.hpp"
#include "data/token_shard_io.hpp"
#include "dpl/core/error.hpp"
#include "dpl/core/random.hpp"
#include "dpl/data/dataset.hpp"
#include "dpl/data/global_batch_source.hpp"

namespace dpl::data {

namespace {

constexpr const char* kOp = "TokenLoader";
// Open shards at most; beyond it all are closed and reopened as needed. Far below the usual
// limit of 1024 open files, so the program keeps room for its own.
constexpr std::int64_t kMaxOpenShards = 64;

}  // namespace

TokenLoader::TokenLoader(std::vector<std::string> shard_paths, std::int64_t batch_size, std::int64_t seq_len,
                         int rank, int world_size, bool shuffle, std::uint64_t seed)
    : paths_(std::move(shard_paths)),
      batch_size_(batch_size),
      seq_len_(seq_len),
      rank_(rank),
      world_size_(world_size),
      shuffle_(shuffle),
      seed_(seed) {
  DPL_CHECK(!paths_.empty(), kOp, ": expected at least one token shard, got none");
  DPL_CHECK(batch_size >= 1, kOp, ": expected batch_size >= 1, got ", batch_size);
  DPL_CHECK(seq_len >= 1, kOp, ": expected seq_len >= 1, got ", seq_len);
  DPL_CHECK(world_size >= 1, kOp, ": expected world_size >= 1, got ", world_size);
  DPL_CHECK(rank >= 0 && rank < world_size, kOp, ": expected a rank in [0, ", world_size, "), got ", rank);
  DPL_CHECK(batch_size <= std::numeric_limits<std::int64_t>::max() / world_size, kOp, ": batch_size ", batch_size,
            " times world_size ", world_size, " overflows");

  ::dpl::detail::StableHash hash;
  const auto add_u64 = [&hash](std::uint64_t v) {
    unsigned char le[8];
    for (int k = 0; k < 8; ++k) le[k] = static_cast<unsigned char>(v >> (8 * k));
    hash.add_bytes(le, sizeof le);
  };
  add_u64(paths_.size());
  std::int64_t longest = 0;
  first_window_.reserve(paths_.size() + 1);
  for (const std::string& path : paths_) {
    std::ifstream in;
    const std::int64_t n = detail::open_token_shard(kOp, path, in);
    // floor((n - 1) / T) windows of T + 1 tokens, starting every T tokens.
    const std::int64_t windows = n > seq_len ? (n - 1) / seq_len : 0;
    if (windows == 0) ++skipped_shards_;
    tokens_.push_back(n);
    first_window_.push_back(num_windows_);
    num_windows_ += windows;
    longest = std::max(longest, n);
    add_u64(static_cast<std::uint64_t>(n));
  }
  first_window_.push_back(num_windows_);
  shards_hash_ = hash.value();
  DPL_CHECK(num_windows_ > 0, kOp, ": none of the ", paths_.size(), " shard(s) holds a window of seq_len + 1 = ",
            seq_len + 1, " tokens (the longest, of ", longest, " tokens, is too short); expected at least one shard of ",
            seq_len + 1, " tokens or more, or a shorter seq_len");
  streams_.resize(paths_.size());
  window_buffer_.resize(static_cast<std::size_t>(seq_len + 1));
}

TokenLoader TokenLoader::with_global_batch(std::vector<std::string> shard_paths, std::int64_t global_batch,
                                           std::int64_t seq_len, int rank, int world_size, bool shuffle,
                                           std::uint64_t seed) {
  const std::int64_t batch = per_process_batch(global_batch, world_size, "TokenLoader::with_global_batch", "windows");
  return TokenLoader(std::move(shard_paths), batch, seq_len, rank, world_size, shuffle, seed);
}

std::vector<std::int64_t> TokenLoader::epoch_order(std::int64_t e) const {
  DPL_CHECK(e >= 0, "TokenLoader::epoch_order: expected an epoch >= 0, got ", e);
  return global_epoch_order(num_windows_, shuffle_, seed_, e);
}

std::pair<std::int64_t, std::int64_t> TokenLoader::window_location(std::int64_t w) const {
  DPL_CHECK(w >= 0 && w < num_windows_, "TokenLoader::window_location: expected a window in [0, ", num_windows_,
            "), got ", w);
  // The last shard whose first window is <= w: shards without windows share their successor's
  // first window and come before it, so they are never chosen.
  const auto it = std::upper_bound(first_window_.begin(), first_window_.end(), w);
  const auto shard = static_cast<std::int64_t>(it - first_window_.begin()) - 1;
  return {shard, (w - first_window_[static_cast<std::size_t>(shard)]) * seq_len_};
}

std::int64_t TokenLoader::window_at(std::int64_t stream_index) {
  const std::int64_t e = epoch_ + stream_index / num_windows_;
  const std::int64_t i = stream_index % num_windows_;
  if (!shuffle_) return i;
  auto it = std::find_if(orders_.begin(), orders_.end(), [e](const auto& o) { return o.first == e; });
  if (it == orders_.end()) {
    // Orders of finished epochs are no longer needed.
    orders_.erase(std::remove_if(orders_.begin(), orders_.end(), [this](const auto& o) { return o.first < epoch_; }),
                  orders_.end());
    orders_.emplace_back(e, epoch_order(e));
    it = orders_.end() - 1;
  }
  return it->second[static_cast<std::size_t>(i)];
}

std::ifstream& TokenLoader::stream(std::int64_t shard) {
  auto& slot = streams_[static_cast<std::size_t>(shard)];
  if (slot) return *slot;
  if (open_streams_ >= kMaxOpenShards) {
    for (auto& s : streams_) s.reset();
    open_streams_ = 0;
  }
  auto in = std::make_unique<std::ifstream>();
  const std::string& path = paths_[static_cast<std::size_t>(shard)];
  const std::int64_t n = detail::open_token_shard(kOp, path, *in);
  DPL_CHECK(n == tokens_[static_cast<std::size_t>(shard)], kOp, ": ", path, " holds ", n,
            " tokens now but held ", tokens_[static_cast<std::size_t>(shard)],
            " when the loader was made; expected the shards unchanged while they are read");
  slot = std::move(in);
  ++open_streams_;
  return *slot;
}

void TokenLoader::read_window(std::int64_t w, std::int64_t* inputs, std::int64_t* targets) {
  const auto [shard, start] = window_location(w);
  std::uint16_t* tok = window_buffer_.data();
  detail::read_shard_tokens(kOp, stream(shard), paths_[static_cast<std::size_t>(shard)], start, seq_len_ + 1, tok);
  for (std::int64_t t = 0; t < seq_len_; ++t) {
    inputs[t] = tok[t];
    targets[t] = tok[t + 1];
  }
}

TokenBatch TokenLoader::next() {
  TokenBatch batch{Tensor::empty({batch_size_, seq_len_}, kInt64), Tensor::empty({batch_size_, seq_len_}, kInt64)};
  std::int64_t* inputs = batch.inputs.data<std::int64_t>();
  std::int64_t* targets = batch.targets.data<std::int64_t>();
  // This rank's slice of the global step; the counters move only once every window is read, so
  // a failed read leaves the loader where it was.
  const std::int64_t first = position_ + static_cast<std::int64_t>(rank_) * batch_size_;
  for (std::int64_t j = 0; j < batch_size_; ++j)
    read_window(window_at(first + j), inputs + j * seq_len_, targets + j * seq_len_);

  advance_global_position(num_windows_, global_batch(), epoch_, position_, is_new_epoch_, iteration_);
  return batch;
}

TokenLoaderState TokenLoader::state() const {
  TokenLoaderState s;
  s.epoch = epoch_;
  s.position = position_;
  s.iteration = iteration_;
  s.is_new_epoch = is_new_epoch_;
  s.global_batch = global_batch();
  s.seq_len = seq_len_;
  s.shuffle = shuffle_;
  s.seed = seed_;
  s.num_windows = num_windows_;
  s.shards_hash = shards_hash_;
  return s;
}

void TokenLoader::load_state(const TokenLoaderState& s) {
  const char* op = "TokenLoader::load_state";
  std::string differences;
  const auto differ = [&differences](const char* name, const auto& saved, const auto& now, const std::string& hint) {
    if (saved == now) return;
    differences += ::dpl::detail::concat(differences.empty() ? "" : "; ", name, " was ", saved, " when saved, is ",
                                         now, " now", hint);
  };
  differ("global batch (B x processes)", s.global_batch, global_batch(),
         ::dpl::detail::concat(" (", batch_size_, " x ", world_size_,
                               "; a state loads on any process count whose batches add up to the saved global "
                               "batch: see TokenLoader::with_global_batch)"));
  differ("seq_len", s.seq_len, seq_len_, "");
  differ("shuffle", std::string(s.shuffle ? "on" : "off"), std::string(shuffle_ ? "on" : "off"), "");
  differ("seed", s.seed, seed_, "");
  differ("number of windows", s.num_windows, num_windows_, "");
  differ("hash of the shard sizes", s.shards_hash, shards_hash_, " (other shards, or the same in another order)");
  DPL_CHECK(differences.empty(), op, ": the state is of another data order: ", differences,
            "; resume with the shards and settings the state was saved with");

  check_global_position(num_windows_, s.global_batch, s.epoch, s.position, s.iteration, op, "windows",
                        "TokenLoader::state()");
  epoch_ = s.epoch;
  position_ = s.position;
  iteration_ = s.iteration;
  is_new_epoch_ = s.is_new_epoch;
  orders_.clear();
}

}  // namespace dpl::data
