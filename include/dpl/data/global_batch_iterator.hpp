#pragma once
// Mini-batches of an in-memory data set split over processes by one global order, resumable on
// another number of processes.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dpl/data/dataset.hpp"
#include "dpl/data/global_batch_source.hpp"

namespace dpl::data {

/// Serves rank `rank` of `world_size` processes its share of the global batches of a data set
/// that every process holds whole.
///
/// Order: epoch e visits every sample once, in global_epoch_order(N, shuffle, seed, e). The
/// epochs' orders are concatenated into one stream; global step k takes its samples
/// [k·G, (k+1)·G) (a step that reaches the end of an epoch continues into the next epoch's order,
/// as Chainer's SerialIterator with repeat does), and rank r takes the B = G / world_size samples
/// [r·B, (r+1)·B) of those. The ranks' batches, concatenated in rank order, are the batch one
/// process with batch G would serve: the sequence of global batches depends only on (data set,
/// G, shuffle, seed), not on the number of processes.
class GlobalBatchIterator : public GlobalBatchSource {
 public:
  /// Requires a non-empty data set, global_batch >= 1, world_size >= 1 dividing global_batch,
  /// and 0 <= rank < world_size; throws dpl::Error naming the argument otherwise.
  /// Ensures: epoch() == 0, iteration() == 0, is_new_epoch() == false.
  GlobalBatchIterator(Dataset dataset, std::int64_t global_batch, int rank = 0, int world_size = 1,
                      bool shuffle = true, std::uint64_t seed = 0);

  /// This rank's B samples of the next global step. Ensures: iteration() grew by one;
  /// is_new_epoch() says whether this step ended an epoch.
  Batch next() override;

  /// The settings it records are "shuffle", "seed", "data set content" (the stable hash of the
  /// images' and labels' bytes), then the program's (set_order_settings).
  GlobalDataState global_state() const override;
  /// See GlobalBatchSource::load_global_state; the counters must also agree
  /// (epoch · N + position == iteration · G, 0 <= position < N).
  void load_global_state(const GlobalDataState& state) override;

  /// Completed epochs.
  std::int64_t epoch() const override { return epoch_; }
  /// Global steps served.
  std::int64_t iteration() const override { return iteration_; }
  /// True when the last next() ended an epoch.
  bool is_new_epoch() const override { return is_new_epoch_; }
  /// epoch() plus the fraction of the current epoch already served.
  double epoch_detail() const override {
    return static_cast<double>(epoch_) + static_cast<double>(position_) / static_cast<double>(dataset_.size());
  }
  /// Global steps per epoch, counting one that reaches into the next epoch: ceil(N / G).
  std::int64_t batches_per_epoch() const override { return (dataset_.size() + global_batch_ - 1) / global_batch_; }
  std::int64_t global_batch() const override { return global_batch_; }
  /// B: samples per step on this process.
  std::int64_t batch_size() const { return global_batch_ / world_size_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  /// The data set the batches come from (the whole of it, on every rank).
  const Dataset& dataset() const { return dataset_; }

 private:
  std::int64_t sample_at(std::int64_t stream_index);  // of the concatenated epoch orders

  Dataset dataset_;
  std::int64_t global_batch_;
  int rank_;
  int world_size_;
  bool shuffle_;
  std::uint64_t seed_;
  std::string content_hash_;
  std::int64_t epoch_ = 0;
  std::int64_t position_ = 0;
  std::int64_t iteration_ = 0;
  bool is_new_epoch_ = false;
  // Orders of the epochs in use (a step may span two, or more for a tiny data set).
  std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>> orders_;
};

}  // namespace dpl::data
