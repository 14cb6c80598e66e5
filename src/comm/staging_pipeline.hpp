#pragma once
// The schedule of a staged collective: a buffer that the collective cannot read where it lives
// (device memory, for an MPI that is not CUDA-aware) goes through a few staging slots in chunks,
// and while chunk k is being reduced the copies in of the next chunks and the copy out of the
// previous ones run. The schedule knows nothing of CUDA or MPI, so it is tested with plain host
// copies (tests/dist/staging_pipeline_test.cpp); src/comm/nccl/device_stager.cpp fills it with
// CUDA copies on their own streams and MPI calls.

#include <algorithm>
#include <cstdint>
#include <functional>

#include "dpl/core/error.hpp"

namespace dpl::comm::detail {

/// The steps of one staged collective over `chunks` chunks and `slots` staging slots. Chunk k
/// uses slot k % slots.
struct StagingSteps {
  /// Starts copying chunk `chunk` into slot `slot` (may return before the copy is done).
  std::function<void(std::int64_t chunk, int slot)> start_in;
  /// Blocks until the copy in of `chunk` is done.
  std::function<void(std::int64_t chunk, int slot)> wait_in;
  /// Runs the collective on the chunk in `slot` (blocking).
  std::function<void(std::int64_t chunk, int slot)> reduce;
  /// Starts copying the result in `slot` back to chunk `chunk` (may return before it is done).
  std::function<void(std::int64_t chunk, int slot)> start_out;
  /// Blocks until the last copy out of `slot` is done, so the slot may be written again.
  std::function<void(int slot)> wait_out;
};

/// Runs the pipeline: copies in run up to slots - 1 chunks ahead of the collective. A slot is
/// refilled right after the next collective has been run, by when its previous copy out (queued
/// one round earlier) has had a whole collective's time to finish, so wait_out rarely blocks and
/// the host goes from one collective to the next without waiting on a copy. Requires slots >= 2;
/// with 3 or more, the copy in of chunk k+1 overlaps the collective of chunk k. Returns once the
/// last collective has run; the last copies out may still be in flight (the caller orders its
/// consumers after them).
inline void run_staging_pipeline(std::int64_t chunks, int slots, const StagingSteps& s) {
  DPL_CHECK(slots >= 2, "run_staging_pipeline: expected at least 2 slots, got ", slots);
  const std::int64_t ahead = slots - 1;
  for (std::int64_t c = 0; c < std::min(ahead, chunks); ++c) s.start_in(c, static_cast<int>(c % slots));
  for (std::int64_t k = 0; k < chunks; ++k) {
    const int slot = static_cast<int>(k % slots);
    s.wait_in(k, slot);
    s.reduce(k, slot);
    s.start_out(k, slot);
    const std::int64_t next = k + ahead;
    if (next < chunks) {
      const int next_slot = static_cast<int>(next % slots);
      // Its previous user is chunk next - slots = k - 1.
      if (next >= slots) s.wait_out(next_slot);
      s.start_in(next, next_slot);
    }
  }
}

}  // namespace dpl::comm::detail
