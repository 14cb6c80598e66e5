#pragma once
// Sources whose position belongs to the whole job rather than to each process: one data order,
// a function of the seed and the epoch alone, from which every process takes its slice of each
// global batch. A checkpoint of such a source, made by p processes, resumes on q processes with
// the same global batches (docs/training-state.md, "Resuming on another number of processes").

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dpl/data/batch_source.hpp"

namespace dpl::data {

/// Where a GlobalBatchSource stands: the same on every rank, and independent of the number of
/// processes except through the global batch they share.
struct GlobalDataState {
  std::int64_t samples = 0;       ///< samples in one epoch's order
  std::int64_t global_batch = 0;  ///< samples per step over all processes together
  std::int64_t epoch = 0;         ///< completed epochs
  std::int64_t iteration = 0;     ///< global steps served
  std::int64_t position = 0;      ///< samples of the current epoch's order served, by all processes together
  bool is_new_epoch = false;      ///< whether the last step ended an epoch
  /// What decided the data and their order, by name ("shuffle", "seed", "data set content", and
  /// the program's own): a resumed source must have the same values.
  std::vector<std::pair<std::string, std::string>> settings;
};

/// A BatchSource whose steps are the consecutive global batches of one data order for the whole
/// job: rank r of p takes samples [r·B, (r+1)·B) of each global batch of B·p samples. Its state
/// is global (GlobalDataState), so a checkpoint resumes it on any number of processes whose
/// batches add up to the saved global batch.
class GlobalBatchSource : public BatchSource {
 public:
  /// Where the source stands, with the settings a resumed source must share.
  virtual GlobalDataState global_state() const = 0;
  /// Continues from a state exported by global_state(), on this source's number of processes:
  /// the next global batches are those the exporting job would have served. Requires the same
  /// samples, global batch and settings, and counters the source could have reached; throws
  /// dpl::Error naming each difference with its saved and its current value, the source unchanged.
  virtual void load_global_state(const GlobalDataState& state) = 0;
  /// Samples per step over all processes.
  virtual std::int64_t global_batch() const = 0;

  /// Names the program's settings that decided the data or their order beyond what the source
  /// knows itself (a list's contents, a data set's version...): global_state() records them after
  /// the source's own, and load_global_state refuses a state recorded with other values, so a
  /// resumed run cannot silently train on other data or in another order.
  void set_order_settings(std::vector<std::pair<std::string, std::string>> settings) {
    order_settings_ = std::move(settings);
  }

 protected:
  /// The settings given to set_order_settings.
  const std::vector<std::pair<std::string, std::string>>& program_order_settings() const { return order_settings_; }

 private:
  std::vector<std::pair<std::string, std::string>> order_settings_;
};

/// B = global_batch / world_size: each process's share of a global batch of `unit`s (samples,
/// windows). Requires global_batch >= 1 and world_size >= 1; throws dpl::Error, beginning with
/// `who`, when world_size does not divide global_batch, listing the process counts that do.
std::int64_t per_process_batch(std::int64_t global_batch, int world_size, const std::string& who,
                               const std::string& unit = "samples");

/// Moves a global position past one step of global_batch of an epoch's n samples: position into
/// the concatenated epochs' orders (epoch, position within it), is_new_epoch whether the step
/// reached an epoch's end, and one more iteration. Requires n >= 1.
void advance_global_position(std::int64_t n, std::int64_t global_batch, std::int64_t& epoch, std::int64_t& position,
                             bool& is_new_epoch, std::int64_t& iteration);

/// Checks saved counters of a global position over epochs of n `unit`s (samples, windows) with
/// global_batch per step: epoch and iteration >= 0, position in [0, n), and epoch·n + position ==
/// iteration·global_batch (every step serves the global batch, so the counters determine each
/// other). Throws dpl::Error beginning with `who`, naming `writer` (what writes consistent
/// counters), otherwise.
void check_global_position(std::int64_t n, std::int64_t global_batch, std::int64_t epoch, std::int64_t position,
                           std::int64_t iteration, const std::string& who, const std::string& unit,
                           const std::string& writer);

/// The order in which epoch e visits n samples: a permutation of 0..n-1 drawn from a generator
/// seeded from (seed, e) alone when shuffle is on, 0, 1, ..., n-1 otherwise. It does not depend on
/// how a run reached the epoch (the number of processes, where it resumed). Requires n >= 1, e >= 0.
std::vector<std::int64_t> global_epoch_order(std::int64_t n, bool shuffle, std::uint64_t seed, std::int64_t e);

/// Checks that a saved state fits a source whose own state is `now`: the same samples, global
/// batch and settings (each that differs named with both values; a different global batch with
/// the per-process batch that would fit). Throws dpl::Error beginning with `who` otherwise.
void check_same_data_order(const GlobalDataState& saved, const GlobalDataState& now, const std::string& who);

}  // namespace dpl::data
