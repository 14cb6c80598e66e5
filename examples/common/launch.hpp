#pragma once
// What every example program does around its training: the device of this rank, and the way an
// error leaves a multi-process run (every rank brought down with the message, never a hang).

#include <exception>
#include <string>
#include <utility>

#include "dpl/comm/communicator.hpp"
#include "dpl/config.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/core/device.hpp"
#include "dpl/core/error.hpp"
#include "dpl/train/trainer.hpp"

namespace dpl::examples {

/// The CPU, or with gpu this rank's GPU, chosen by its rank on the physical machine (virtual
/// nodes, DPL_RANKS_PER_NODE, share its GPUs). Throws dpl::Error when gpu is asked of a build
/// without CUDA or of a machine without a device.
inline Device device_for_rank(bool gpu, const comm::Communicator& comm) {
  if (!gpu) return Device::cpu();
  DPL_CHECK(DPL_WITH_CUDA, "--gpu was given, but this build of dpl has no CUDA backend "
                           "(rebuild on a machine with the CUDA toolkit)");
  const int index = cuda::select_device_for_local_rank(comm.host_rank());
  DPL_CHECK(index >= 0, "--gpu was given, but rank ", comm.rank(), " finds no CUDA device");
  return Device::cuda(index);
}

/// Checks the output folder first (before any data or MPI work, so a bad -o fails at once), then
/// returns run()'s exit status; any exception ends every rank through comm::abort_all with its
/// message.
template <typename Run>
int run_or_abort(const std::string& out, Run&& run) {
  try {
    train::prepare_output_folder(out);
    return std::forward<Run>(run)();
  } catch (const std::exception& e) {
    comm::abort_all(e.what());
  }
}

}  // namespace dpl::examples
