#pragma once
// Checkpoints: everything a run needs to continue exactly where it stopped, in one safetensors
// file — the model, the optimizer's state, the data position (every rank's iterator, or the job's
// global one), every rank's random generators, the log's history and the caller's own values.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dpl/comm/communicator.hpp"
#include "dpl/core/random.hpp"
#include "dpl/data/batch_iterator.hpp"
#include "dpl/data/global_batch_source.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/optim/optimizer.hpp"
#include "dpl/train/training_log.hpp"

namespace dpl::train {

/// The parts of a run that a checkpoint saves and restores. Null pointers (and empty lists) are
/// left out of it. The model and the optimizer are the same on every rank and are saved from
/// rank 0; the iterator and the generators are each rank's own and are saved for every rank; a
/// global source's position is the job's and is saved once; the log is rank 0's (the other ranks
/// pass nullptr); values are rank 0's, given back to every rank.
///
/// A checkpoint loads on another number of processes than saved it when it has no per-rank
/// iterator: the source, if any, is global, the generators are re-seeded (see load_checkpoint)
/// and each rank's values come back in saved_rank_values.
struct TrainingState {
  nn::Module* model = nullptr;                                  ///< required
  optim::Optimizer* optimizer = nullptr;                        ///< set up on model
  data::BatchIterator* iterator = nullptr;                      ///< this rank's
  std::vector<std::pair<std::string, Generator*>> generators{}; ///< this rank's, by name
  TrainingLog* log = nullptr;                                   ///< rank 0's
  std::map<std::string, std::string> values{};                  ///< the caller's own, as text
  /// This rank's own values, as text (e.g. its observations not yet logged): saved for every rank
  /// under its rank; on loading, each key the file holds for this rank is set (a key it lacks,
  /// in a file written before the key was, keeps its value). Every rank passes the same keys.
  std::map<std::string, std::string> rank_values{};
  /// The run the state belongs to (new_run_id()): save_checkpoint writes it into the metadata
  /// under "run"; load_checkpoint sets it to the file's, so a resumed run continues the lineage
  /// (a file without one leaves it as it is); remove_old_checkpoints prunes one run's files only.
  /// Empty: none is written.
  std::string run_id{};
  /// The job's global data source, the same on every rank (saved once); not with iterator.
  data::GlobalBatchSource* source = nullptr;
  /// Set by load_checkpoint from a file of another number of processes, where no saved rank is
  /// this rank: for each key of rank_values that the file holds, every saved rank's text in rank
  /// order (rank_values then keep their values). Empty otherwise.
  std::map<std::string, std::vector<std::string>> saved_rank_values{};
};

/// A fresh run id: 16 hex digits from std::random_device, the clock and the process id, so two
/// runs (also two processes started in the same instant) get different ones.
std::string new_run_id();

/// The format tag a checkpoint's metadata holds under "format".
inline constexpr const char* kCheckpointFormat = "dpl-checkpoint-1";

/// Writes state to path as one safetensors file (see docs/training-state.md for its names).
///
/// Collective over comm (nullptr: this process alone): every rank calls it with the same parts
/// (the same kinds and generator names). The ranks' iterator and generator states are gathered to
/// rank 0, which alone writes the file, atomically (a temporary beside path, fsync, rename). Each
/// tensor's checksum goes into the metadata, so a file damaged later is refused on loading.
/// Requires: state.model; the parts described above.
/// Ensures: path holds the complete checkpoint or what it held before. Throws dpl::Error on every
/// rank when any rank's parts differ from rank 0's or the write fails (every rank naming the
/// rank(s) that failed, rank 0 for the write, and the reason), so no rank is left waiting.
void save_checkpoint(const std::string& path, const TrainingState& state, comm::Communicator* comm = nullptr);

/// Restores state from a checkpoint written by save_checkpoint, on every rank.
///
/// Collective over comm: every rank reads the file and checks it in full before anything changes:
/// the format, every tensor's checksum (a damaged or truncated file is refused naming the file and
/// the tensor), the model's names, shapes and dtypes, the optimizer's state names, the kind of
/// data position (per-rank iterators or a global source, as saved), and, for per-rank iterators,
/// that it was saved by as many ranks as there are now. Then the ranks check that they all read
/// the same checkpoint (the hash of its checksums and metadata, compared through
/// comm::check_ranks_agree) and restore their parts: a global source takes the saved position
/// (GlobalBatchSource::load_global_state); with as many ranks as saved it, rank r takes the
/// iterator, generators and values rank r saved; with another number, each generator is seeded
/// afresh from a hash of the state saved rank 0's had, its name, this rank and the number of
/// ranks (deterministic, but not the stream any saved rank would have drawn), and the values come
/// back in saved_rank_values. state.values receives the saved values.
/// Requires: the same parts as were saved (the log may be absent on either side).
/// Throws dpl::Error on every rank when any rank fails, naming the file and what is wrong, and,
/// when not every rank failed alike, the ranks that failed.
void load_checkpoint(const std::string& path, TrainingState& state, comm::Communicator* comm = nullptr);

/// The global batch of the global data source saved in the checkpoint at path, read from its
/// header alone (not collective, no checksum read): what a program resuming on another number of
/// processes divides among them. 0 when the file holds no global source (per-rank iterators, or
/// no data position). Throws dpl::Error naming the file when it cannot be read as a checkpoint.
std::int64_t checkpoint_global_batch(const std::string& path);

/// The model's parameters and buffers held by the checkpoint at path, under the names
/// serialize::save_weights gives them (without the checkpoint's "model/" prefix), in the file's
/// order. Not collective: any one process (a tool, an evaluation program) may call it.
/// Throws dpl::Error naming the file when it is not a dpl checkpoint or is damaged (a tensor that
/// does not match its checksum), as load_checkpoint does.
std::vector<std::pair<std::string, Tensor>> checkpoint_model_tensors(const std::string& path);
/// Loads the model saved in the checkpoint at path into model, as serialize::load_weights loads a
/// file of weights (with its strict meaning, the model unchanged on any error); the checkpoint's
/// other parts are not read. Not collective. For a program that evaluates or fine-tunes a trained
/// model; Trainer::resume continues the training itself.
void load_model_from_checkpoint(nn::Module& model, const std::string& path, bool strict = true);

/// The file name of the checkpoint at an iteration: "snapshot_iter_<iteration>.safetensors".
std::string checkpoint_name(std::int64_t iteration);

/// The checkpoints in folder (files named as checkpoint_name names them), oldest iteration first;
/// empty when the folder does not exist.
std::vector<std::string> list_checkpoints(const std::string& folder);

/// The run id a checkpoint's metadata holds under "run", read from its header alone; empty when
/// the file cannot be read as a checkpoint's header or holds no run id.
std::string checkpoint_run_id(const std::string& path);

/// Deletes all but the newest keep checkpoints of folder that belong to run_id (checkpoint_run_id);
/// checkpoints of other runs sharing the folder, and files without a run id, are never touched.
/// Requires keep >= 1 and a non-empty run_id (dpl::Error otherwise). Call it once a new checkpoint
/// is complete, so that one always survives.
void remove_old_checkpoints(const std::string& folder, std::int64_t keep, const std::string& run_id);

}  // namespace dpl::train
