#pragma once
// Batches of token windows for language models, read from token shards, split over processes,
// resumable on another number of processes.

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpl/tensor/tensor.hpp"

namespace dpl::data {

/// One process's share of a global batch: B windows of T + 1 consecutive tokens, split into what
/// the model reads and what it predicts.
struct TokenBatch {
  Tensor inputs;   ///< (B, T) int64 on the host: tokens 0..T-1 of each window
  Tensor targets;  ///< (B, T) int64 on the host: tokens 1..T of each window (inputs shifted by one)
};

/// Where a TokenLoader stands, for every process at once: the position is global, so the state
/// is the same on every rank and loads on any number of processes with the same global batch.
struct TokenLoaderState {
  std::int64_t epoch = 0;       ///< completed epochs
  std::int64_t position = 0;    ///< windows of the current epoch's order served, by all processes together
  std::int64_t iteration = 0;   ///< global steps served
  bool is_new_epoch = false;    ///< whether the last step ended an epoch
  // What must match on resume (load_state compares each and names the ones that differ).
  std::int64_t global_batch = 0;    ///< windows per step over all processes, B·p
  std::int64_t seq_len = 0;         ///< T
  bool shuffle = true;              ///< whether epochs are shuffled
  std::uint64_t seed = 0;           ///< the shuffling seed
  std::int64_t num_windows = 0;     ///< windows in one epoch
  std::uint64_t shards_hash = 0;    ///< stable hash of the shards' token counts, in order
};

/// Serves batches of token windows from token shards (llm.c's .bin format) to one process of p.
///
/// Windows: in each shard of n tokens, the windows start at tokens 0, T, 2T, ... and hold T + 1
/// tokens, so a shard has floor((n - 1) / T) of them and consecutive windows share one token (as
/// llm.c's loader reads them); a window never crosses a shard boundary, and the last n - 1 mod T
/// tokens of a shard are not trained on. Windows are numbered shard by shard in the order of the
/// paths given. A shard with fewer than T + 1 tokens has no window: it is skipped and counted
/// (skipped_shards()); when no shard has a window the loader refuses to start.
///
/// Order: epoch e visits every window once, in epoch_order(e): a permutation drawn from a
/// Generator seeded from (seed, e) alone when shuffle is on, the window numbering otherwise. The
/// epochs' orders are concatenated into one stream; global step k takes its windows
/// [k·B·p, (k+1)·B·p) (a step that reaches the end of an epoch continues into the next epoch's
/// order, as Chainer's SerialIterator does), and rank r takes the B windows [r·B, (r+1)·B) of
/// those. A rank reads only its own windows from disk, and the ranks' batches, concatenated in
/// rank order, are the global batch a single process with batch B·p would serve.
///
/// Shards are read a window at a time (seek and read), so they may be larger than memory; a
/// shuffled epoch's order takes 8 bytes per window.
class TokenLoader {
 public:
  /// A loader of batch_size windows per step for rank `rank` of world_size processes.
  /// Requires: at least one shard, batch_size >= 1, seq_len >= 1, world_size >= 1,
  /// 0 <= rank < world_size, every shard a valid token shard (as token_shard_size checks), and at
  /// least one window in all. Throws dpl::Error naming the argument or shard otherwise.
  /// Ensures: epoch() == 0, iteration() == 0, is_new_epoch() == false.
  TokenLoader(std::vector<std::string> shard_paths, std::int64_t batch_size, std::int64_t seq_len, int rank = 0,
              int world_size = 1, bool shuffle = true, std::uint64_t seed = 0);

  /// A loader whose processes together take global_batch windows per step: B = global_batch /
  /// world_size each. This is how a run resumed on another number of processes keeps its batches.
  /// Requires world_size to divide global_batch; throws dpl::Error saying so otherwise (and as the
  /// constructor throws).
  static TokenLoader with_global_batch(std::vector<std::string> shard_paths, std::int64_t global_batch,
                                       std::int64_t seq_len, int rank, int world_size, bool shuffle = true,
                                       std::uint64_t seed = 0);

  /// This rank's windows of the next global step. Ensures: iteration() grew by one;
  /// is_new_epoch() says whether this step ended an epoch. Throws dpl::Error naming the file and
  /// offset when a shard cannot be read (or has changed size since the loader was made).
  TokenBatch next();

  /// Where the loader stands, with the settings a resumed loader must share.
  TokenLoaderState state() const;
  /// Continues from a state exported by state() on any number of processes: the next global
  /// batches are those the exporting run would have served. Requires the same global batch,
  /// seq_len, shuffle, seed, number of windows and shard sizes, and counters that agree
  /// (epoch · num_windows + position == iteration · global_batch, 0 <= position < num_windows).
  /// Throws dpl::Error naming each field that differs with its saved and its current value,
  /// leaving the loader unchanged.
  void load_state(const TokenLoaderState& state);

  /// Completed epochs.
  std::int64_t epoch() const { return epoch_; }
  /// Global steps served.
  std::int64_t iteration() const { return iteration_; }
  /// True when the last next() ended an epoch.
  bool is_new_epoch() const { return is_new_epoch_; }
  /// epoch() plus the fraction of the current epoch already served.
  double epoch_detail() const {
    return static_cast<double>(epoch_) + static_cast<double>(position_) / static_cast<double>(num_windows_);
  }
  /// Global steps per epoch, counting one that reaches into the next epoch: ceil(windows / (B·p)).
  std::int64_t batches_per_epoch() const { return (num_windows_ + global_batch() - 1) / global_batch(); }

  /// B: windows per step on this process.
  std::int64_t batch_size() const { return batch_size_; }
  /// B·p: windows per step over all processes.
  std::int64_t global_batch() const { return batch_size_ * world_size_; }
  /// T: tokens per row of inputs and targets.
  std::int64_t seq_len() const { return seq_len_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  /// Windows in one epoch, over all shards.
  std::int64_t num_windows() const { return num_windows_; }
  /// Shards given that are too short for one window (fewer than T + 1 tokens).
  std::int64_t skipped_shards() const { return skipped_shards_; }
  /// The shard paths, as given.
  const std::vector<std::string>& shard_paths() const { return paths_; }

  /// The order in which epoch e visits the windows: a permutation of 0..num_windows()-1 that
  /// depends only on (seed, e, num_windows()) when shuffle is on; 0, 1, ... otherwise.
  /// Requires e >= 0.
  std::vector<std::int64_t> epoch_order(std::int64_t e) const;
  /// Window w as (shard index, token offset of its first token). Requires 0 <= w < num_windows().
  std::pair<std::int64_t, std::int64_t> window_location(std::int64_t w) const;

 private:
  std::int64_t window_at(std::int64_t stream_index);  // window of the concatenated epoch orders
  void read_window(std::int64_t w, std::int64_t* inputs, std::int64_t* targets);
  std::ifstream& stream(std::int64_t shard);

  std::vector<std::string> paths_;
  std::vector<std::int64_t> tokens_;       // per shard
  std::vector<std::int64_t> first_window_;  // per shard, then the total: window numbering
  std::int64_t batch_size_;
  std::int64_t seq_len_;
  int rank_;
  int world_size_;
  bool shuffle_;
  std::uint64_t seed_;
  std::int64_t num_windows_ = 0;
  std::int64_t skipped_shards_ = 0;
  std::uint64_t shards_hash_ = 0;

  std::int64_t epoch_ = 0;
  std::int64_t position_ = 0;
  std::int64_t iteration_ = 0;
  bool is_new_epoch_ = false;

  // Orders of the epochs in use (a step may span two, or more for tiny data), drawn when needed.
  std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>> orders_;
  // Open shards, opened when first read; kept few enough for the process's file limit.
  std::vector<std::unique_ptr<std::ifstream>> streams_;
  std::int64_t open_streams_ = 0;
  std::vector<std::uint16_t> window_buffer_;
};

}  // namespace dpl::data
