#include "comm/nccl/nccl_context.hpp"

#include <unistd.h>

#include <string>
#include <vector>

#include "backend/cuda/comm_interop.hpp"
#include "comm/checks.hpp"
#include "dpl/comm/agreement.hpp"

namespace dpl::comm::detail {

using backend::comm_interop::DeviceGuard;

namespace {

// Lets this GPU read and write the other GPUs of the machine directly where the hardware allows
// (cudaMemcpyPeer and kernels then skip the host); NCCL sets up its own paths anyway.
void enable_peer_access(int d) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return;
  for (int peer = 0; peer < count; ++peer) {
    if (peer == d) continue;
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, d, peer) != cudaSuccess || !can) continue;
    const cudaError_t rc = cudaDeviceEnablePeerAccess(peer, 0);
    if (rc != cudaSuccess) cudaGetLastError();  // "already enabled" (or refused): not an error here
  }
}

}  // namespace

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kFloat16: return ncclFloat16;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    case DType::kUInt8: return ncclUint8;
  }
  DPL_FAIL("nccl_type: no NCCL type for dtype ", dtype);
}

NcclContext::NcclContext(std::string name, const MpiGroups& groups, Communicator& host)
    : name_(std::move(name)), groups_(groups), host_(host) {}

NcclContext::~NcclContext() {
  if (device_ < 0) return;
  if (watched_) remove_device_work(this);  // before anything it polls goes
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
  if (world_) ncclCommDestroy(world_);
  if (intra_) ncclCommDestroy(intra_);
  cudaEventDestroy(compute_ready_);
  cudaEventDestroy(comm_done_);
  cudaStreamDestroy(stream_);
}

void NcclContext::bind(const Tensor& t, const char* collective) {
  const int d = t.device().index;
  if (device_ >= 0) {
    DPL_CHECK(d == device_, what_call(collective, name_), ": expected a buffer on cuda:", device_,
              " (this communicator's GPU, from its first device call), got one on ", t.device());
    return;
  }
  DeviceGuard guard(d);
  DPL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DPL_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
  DPL_CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
  enable_peer_access(d);
  device_ = d;
  add_device_work(this);
  watched_ = true;
}

cudaStream_t NcclContext::compute_stream() const { return backend::comm_interop::compute_stream(device_); }

const NcclContext::GpuSharing& NcclContext::sharing() {
  if (sharing_known_) return sharing_;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  char bus[64] = {0};
  DPL_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device_));
  // Every rank gets the same two tables, so every rank reaches the same decision, for its own
  // node as for the job: no node can take NCCL's path while another takes MPI's.
  const std::vector<std::uint64_t> gpu = gather_description_hashes(host_, std::string(host) + '\n' + bus);
  const std::vector<std::uint64_t> node = gather_description_hashes(host_, std::to_string(host_.inter_rank()));
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    for (std::size_t j = i + 1; j < gpu.size(); ++j) {
      if (gpu[i] != gpu[j]) continue;
      sharing_.in_job = true;
      if (node[i] == node[j]) sharing_.in_a_node = true;
    }
  }
  sharing_known_ = true;
  return sharing_;
}

ncclComm_t NcclContext::create(MPI_Comm group) {
  const std::string what = what_call("NCCL setup", name_);
  int grank = 0, gsize = 1;
  MPI_Comm_rank(group, &grank);
  MPI_Comm_size(group, &gsize);
  ncclUniqueId id;
  if (grank == 0) DPL_NCCL_CHECK(ncclGetUniqueId(&id), what);
  DPL_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, group), what + ": MPI_Bcast");
  DeviceGuard guard(device_);
  ncclComm_t c = nullptr;
  DPL_NCCL_CHECK(ncclCommInitRank(&c, gsize, id, grank), what);
  return c;
}

ncclComm_t NcclContext::world() {
  if (!world_tried_) {
    world_tried_ = true;
    if (!sharing().in_job) {
      ncclComm_t c = create(groups_.world);
      std::lock_guard<std::mutex> lock(watch_mu_);
      world_ = c;
    }
  }
  return world_;
}

ncclComm_t NcclContext::intra() {
  if (!intra_tried_) {
    intra_tried_ = true;
    if (!sharing().in_a_node) {
      ncclComm_t c = create(groups_.intra);
      std::lock_guard<std::mutex> lock(watch_mu_);
      intra_ = c;
    }
  }
  return intra_;
}

void NcclContext::begin() {
  DPL_CUDA_CHECK(cudaEventRecord(compute_ready_, compute_stream()));
  DPL_CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_ready_, 0));
}

void NcclContext::end() {
  {
    // The event and what it stands for change together, under the lock the watchdog polls with.
    std::lock_guard<std::mutex> lock(watch_mu_);
    DPL_CUDA_CHECK(cudaEventRecord(comm_done_, stream_));
    queued_ = current_op();
    if (queued_.start_ns == 0) queued_.start_ns = steady_ns();  // a call outside any watched one
  }
  DPL_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), comm_done_, 0));
}

WatchedOp NcclContext::unfinished() noexcept {
  std::lock_guard<std::mutex> lock(watch_mu_);
  if (queued_.start_ns == 0) return {};
  cudaSetDevice(device_);  // the watchdog thread's current device; it runs no other CUDA work
  const cudaError_t rc = cudaEventQuery(comm_done_);
  if (rc == cudaErrorNotReady) return queued_;
  if (rc != cudaSuccess) cudaGetLastError();  // a failed query is the host call's to report
  queued_.start_ns = 0;
  return {};
}

void NcclContext::abort() noexcept {
  std::lock_guard<std::mutex> lock(watch_mu_);
  // ncclCommAbort ends the kernels that wait for ranks that will never come, so that no GPU is
  // left spinning on a communicator nobody will use again.
  if (world_) ncclCommAbort(world_);
  if (intra_) ncclCommAbort(intra_);
  world_ = intra_ = nullptr;
}

}  // namespace dpl::comm::detail
