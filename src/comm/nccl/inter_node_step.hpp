#pragma once
// The MPI step of the device allreduces (across nodes in hierarchical and two_dimensional, over
// all ranks in flat): an in-place MPI_Allreduce of a device buffer, which a CUDA-aware MPI reads
// directly and any other MPI gets through the pipelined staging of DeviceStager.

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "comm/nccl/device_stager.hpp"
#include "comm/nccl/phase_events.hpp"
#include "dpl/core/dtype.hpp"

namespace dpl::comm::detail {

class InterNodeStep {
 public:
  /// The step of communicator `comm_name` (for messages). Asks now whether MPI can read device
  /// memory: DPL_MPI_CUDA_AWARE=0/1 decides when set, else MPIX_Query_cuda_support() where the
  /// MPI has it (Open MPI's mpi-ext.h), else no.
  explicit InterNodeStep(std::string comm_name);

  /// In place: the n elements of dtype at device pointer data (on `device`) = their sum over
  /// `group`, once `stream`'s work queued so far is done. Leaves `stream` ordered after the
  /// results, and records the kD2h* and kH2d* marks of events. Returns the seconds spent in MPI.
  /// A 16-bit dtype is summed by a host-side MPI operation, so it is always staged.
  double run(MPI_Comm group, void* data, std::int64_t n, DType dtype, int device, cudaStream_t stream,
             PhaseEvents& events);

 private:
  const std::string name_;
  const bool cuda_aware_;
  std::unique_ptr<DeviceStager> stager_;  // created on the first staged run, on its device
};

}  // namespace dpl::comm::detail
