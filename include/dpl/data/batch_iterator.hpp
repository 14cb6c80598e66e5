#pragma once
// Mini-batches over a data set, with Chainer's SerialIterator semantics.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dpl/core/random.hpp"
#include "dpl/data/batch_source.hpp"
#include "dpl/data/dataset.hpp"

namespace dpl::data {

/// Where a BatchIterator stands, exactly enough to continue its sequence of batches elsewhere.
struct BatchIteratorState {
  std::int64_t dataset_size = 0;           ///< N of the iterator that saved it (checked on load)
  std::int64_t batch_size = 0;             ///< its batch size (checked on load)
  std::int64_t epoch = 0;                  ///< completed epochs
  std::int64_t iteration = 0;              ///< batches served
  std::int64_t position = 0;               ///< samples of the current epoch's order already served
  bool is_new_epoch = false;               ///< whether the last batch ended an epoch
  std::vector<std::int64_t> order;         ///< the current epoch's order, a permutation of 0..N-1
  std::vector<std::uint64_t> generator;    ///< the shuffling generator's Generator::state()
  /// What decided the data and their order, by name (checked on load): the iterator's own
  /// ("shuffle", "data set content") and the program's (BatchIterator::set_order_settings).
  /// Empty in a state saved before settings were recorded; then nothing is compared.
  std::vector<std::pair<std::string, std::string>> settings;
};

/// Draws mini-batches from a data set in the order of Chainer's SerialIterator.
///
/// An epoch is one pass over the N samples, in a fresh permutation drawn from the iterator's own
/// Generator(seed) when shuffle is on (the same seed gives the same sequence of batches).
/// With repeat on, every batch has exactly batch_size samples: a batch that reaches the end of an
/// epoch is completed from the start of the next epoch's order (so batches wrap across epochs,
/// and the epoch counter advances on the batch that crossed the boundary). With repeat off, the
/// last batch of the epoch holds the N mod batch_size remaining samples (when non-zero) and the
/// iterator is then exhausted.
///
/// Batches are copied into buffers the iterator keeps and reuses, so a steady loop allocates
/// nothing. A buffer is reused only when no tensor outside the iterator still views it: keeping a
/// Batch (or a view of it) past the next call is safe and merely costs an allocation.
class BatchIterator : public BatchSource {
 public:
  /// Requires: batch_size >= 1 and a non-empty data set; throws dpl::Error otherwise.
  /// Ensures: epoch() == 0, iteration() == 0, is_new_epoch() == false.
  BatchIterator(Dataset dataset, std::int64_t batch_size, bool shuffle = true, std::uint64_t seed = 0,
                bool repeat = true);

  /// The next mini-batch. Requires has_next(); throws dpl::Error when the iterator is exhausted.
  /// Ensures: iteration() grew by one; is_new_epoch() says whether this batch ended an epoch.
  Batch next() override;
  /// False only when repeat is off and the single epoch has been served.
  bool has_next() const { return repeat_ || epoch_ == 0; }
  /// Starts over: epoch 0, iteration 0, the generator reseeded with the constructor's seed.
  void reset();

  /// The position, the current order and the shuffling generator (a copy).
  BatchIteratorState state() const;
  /// Continues from a state exported by state(): the next batches are those the exporting
  /// iterator would have served. Requires the same data set size and batch size, epoch,
  /// iteration >= 0, 0 <= position < N, an order that is a permutation of 0..N-1 and a valid
  /// generator state; throws dpl::Error naming the field, what was expected and what came, with
  /// the iterator unchanged. Shuffle, seed and repeat stay this iterator's own.
  /// When the state records settings, they must equal this iterator's (same names, same values):
  /// otherwise throws dpl::Error naming each setting that differs with its saved and its current
  /// value (a data set whose content differs is named without values, which differ by rank).
  void load_state(const BatchIteratorState& state);

  /// Names the program's settings that decided this iterator's data or order, beyond what the
  /// iterator knows itself: a seed that shuffled the data before they were split into shards, a
  /// data set's version... ("seed (--seed)", "0"). state() records them with the iterator's own
  /// (shuffle, and a hash of the data set's content), and load_state refuses a state recorded
  /// with other values, so a resumed run cannot silently train on other data or in another order.
  void set_order_settings(std::vector<std::pair<std::string, std::string>> settings);
  /// What state() records in BatchIteratorState::settings: "shuffle", "data set content" (the
  /// stable hash of the images' and labels' bytes), then the program's order settings.
  std::vector<std::pair<std::string, std::string>> order_settings() const;

  /// Completed epochs.
  std::int64_t epoch() const override { return epoch_; }
  /// Batches served since construction or reset().
  std::int64_t iteration() const override { return iteration_; }
  /// True when the last next() finished an epoch.
  bool is_new_epoch() const override { return is_new_epoch_; }
  /// epoch() plus the fraction of the current epoch already served (Chainer's epoch_detail).
  double epoch_detail() const override { return static_cast<double>(epoch_) + static_cast<double>(position_) / size_; }
  /// Batches in one epoch, counting a final partial one: ceil(N / batch_size).
  std::int64_t batches_per_epoch() const override { return (size_ + batch_size_ - 1) / batch_size_; }
  /// The batch size given at construction (every batch's size with repeat on).
  std::int64_t batch_size() const { return batch_size_; }
  /// The data set the batches come from.
  const Dataset& dataset() const { return dataset_; }

 private:
  struct Buffers {
    Tensor x, y;
  };
  Buffers& free_buffers();
  void new_order();

  Dataset dataset_;
  std::int64_t size_;
  std::int64_t batch_size_;
  bool shuffle_;
  std::uint64_t seed_;
  bool repeat_;
  std::vector<std::pair<std::string, std::string>> order_settings_;  // the program's
  Generator gen_;
  std::vector<std::int64_t> order_;
  std::int64_t position_ = 0;
  std::int64_t epoch_ = 0;
  std::int64_t iteration_ = 0;
  bool is_new_epoch_ = false;
  // Two sets, so that a caller holding the previous batch while asking for the next still gets
  // a buffer without an allocation.
  std::vector<Buffers> buffers_;
};

}  // namespace dpl::data
