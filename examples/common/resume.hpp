#pragma once
// The batch of a run that may resume a checkpoint on another number of processes, shared by the
// example programs: the global batch is what a checkpoint keeps, and the processes divide it.

#include <cstdint>
#include <string>

#include "dpl/core/error.hpp"
#include "dpl/data/global_batch_source.hpp"
#include "dpl/train/checkpoint.hpp"

namespace dpl::examples {

/// The global batch of a run started with `batch` per process (the flag `flag`, `given` when it
/// was on the command line) on `processes` processes: batch · processes, or, resuming (`resume`
/// not empty) from a checkpoint of a data::GlobalBatchSource, the checkpoint's global batch, so a
/// job restarted on another number of processes keeps its batches, learning rate and schedule.
/// Throws dpl::Error on every rank alike (each reads the checkpoint's header) when the processes
/// do not divide the saved global batch, listing the counts that do, or when `flag` was given
/// with a value that makes another global batch. A checkpoint of per-rank iterators returns
/// batch · processes; loading it then says whether it fits.
inline std::int64_t resumed_global_batch(const std::string& program, const std::string& flag, std::int64_t batch,
                                         bool given, const std::string& resume, int processes) {
  if (resume.empty()) return batch * processes;
  const std::int64_t saved = train::checkpoint_global_batch(resume);
  if (saved == 0) return batch * processes;
  const std::int64_t share = data::per_process_batch(saved, processes, program + ": --resume " + resume);
  DPL_CHECK(!given || batch == share, program, ": ", flag, " ", batch, " on ", processes,
            " processes makes a global batch of ", batch * processes, ", but ", resume,
            " was trained with a global batch of ", saved, "; leave ", flag, " out (each process then takes ", share,
            ") or give ", flag, " ", share);
  return saved;
}

}  // namespace dpl::examples
