#pragma once
// What every device communicator needs on its GPU, whatever its algorithm: the GPU it is bound
// to, its own stream ordered against the compute stream, and NCCL communicators over all ranks
// and over the node, bootstrapped over MPI.
//
// Streams: NCCL calls (and the staged MPI steps) run on the communicator's own stream. A
// collective first makes that stream wait for the compute stream (begin), and at the end makes
// the compute stream wait for it (end), so results are ordered for later kernels and a buffer
// freed afterwards is reused only after the collective has read it. No host synchronisation.

#include <mpi.h>
#include <nccl.h>

#include <mutex>
#include <string>

#include "comm/mpi/mpi_communicator.hpp"
#include "comm/watchdog.hpp"
#include "dpl/comm/communicator.hpp"

/// Throws dpl::Error("<what>: NCCL call <call> failed: <NCCL's text>") unless call succeeds.
#define DPL_NCCL_CHECK(call, what)                                                                     \
  do {                                                                                                 \
    const ncclResult_t dpl_nccl_rc_ = (call);                                                          \
    if (dpl_nccl_rc_ != ncclSuccess)                                                                   \
      DPL_FAIL((what), ": NCCL call ", #call, " failed: ", ncclGetErrorString(dpl_nccl_rc_), " (",     \
               ncclGetLastError(nullptr), ")");                                                        \
  } while (0)

namespace dpl::comm::detail {

/// The NCCL element type of dtype (every dtype dpl has).
ncclDataType_t nccl_type(DType dtype);

/// Also the collective watchdog's view of this communicator's GPU work (DeviceWork): the NCCL
/// kernels of a collective outlive its host call, and ranks that fail to meet hang there.
class NcclContext final : public DeviceWork {
 public:
  /// For the communicator `name` over `groups`. `host` is a communicator over the same ranks for
  /// host buffers, over which the ranks find out whether they share GPUs. Creates nothing on a GPU.
  NcclContext(std::string name, const MpiGroups& groups, Communicator& host);
  /// Waits for this stream's work and frees everything; never throws (it may run at exit, after
  /// the CUDA runtime is gone).
  ~NcclContext() override;
  NcclContext(const NcclContext&) = delete;
  NcclContext& operator=(const NcclContext&) = delete;

  /// The first call binds to t's GPU: creates the stream and events there and enables peer access
  /// to the machine's other GPUs. Later calls require t on the same GPU (else dpl::Error naming
  /// `collective`). Requires t on a GPU.
  void bind(const Tensor& t, const char* collective);
  /// The bound GPU (-1 before the first bind).
  int device() const { return device_; }
  /// This communicator's stream on the bound GPU.
  cudaStream_t stream() const { return stream_; }
  /// The compute stream of the bound GPU, as comm_interop::compute_stream gives it to the calling
  /// thread (the side lane's stream on the overlapped allreduce's worker).
  cudaStream_t compute_stream() const;

  /// The NCCL communicator over all ranks, created on the first call, or null when two ranks of
  /// the job share a GPU (NCCL needs one rank per GPU). Collective over all ranks on the first
  /// call; every rank gets the same answer. Requires bind().
  ncclComm_t world();
  /// As world(), over the ranks of this node; null when two ranks of any node share a GPU.
  ncclComm_t intra();

  /// Our stream starts after the compute stream's work queued so far.
  void begin();
  /// The compute stream continues after our stream's work queued so far, and the watchdog
  /// watches that work as the current collective's until it has finished on the GPU.
  void end();

  /// DeviceWork: the collective whose work end() queued last, while the GPU has not finished it.
  WatchedOp unfinished() noexcept override;
  /// DeviceWork: ncclCommAbort on both NCCL communicators (the job is aborted next).
  void abort() noexcept override;

  /// The MPI groups of the wrapped host communicator, for the algorithms' MPI steps.
  const MpiGroups& groups() const { return groups_; }

 private:
  // Whether NCCL can run over all ranks, and over each node: decided once, from a table every
  // rank holds alike.
  struct GpuSharing {
    bool in_job = false;
    bool in_a_node = false;
  };
  const GpuSharing& sharing();
  ncclComm_t create(MPI_Comm group);

  const std::string name_;
  const MpiGroups groups_;
  Communicator& host_;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr, comm_done_ = nullptr;
  bool sharing_known_ = false;
  GpuSharing sharing_;
  bool world_tried_ = false, intra_tried_ = false;
  ncclComm_t world_ = nullptr, intra_ = nullptr;
  // Guards what the watchdog thread reads: the NCCL communicators, the last queued collective and
  // the event recorded after it.
  std::mutex watch_mu_;
  WatchedOp queued_;
  bool watched_ = false;
};

}  // namespace dpl::comm::detail
