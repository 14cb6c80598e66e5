// The device communicators of NCCL builds: pure_nccl, single_node, hierarchical,
// two_dimensional and flat on GPU buffers. Host buffers (and device buffers where NCCL cannot
// run, see below) go to the wrapped MPI communicator through the staging wrapper, so every name
// keeps working on the host and in CI.
//
// Streams: NCCL calls and the staged MPI step run on this communicator's own stream (and the
// stager's copy streams). Each collective first makes that stream wait for the compute stream
// (an event), and at the end makes the compute stream wait for it, so results are ordered for
// later kernels and a buffer freed afterwards is reused only after the collective has read it.
// The host waits only where MPI needs host data (the staged inter-node step) and in send/recv.
#include <mpi.h>
#include <nccl.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // MPIX_Query_cuda_support, where the MPI has it
#endif
#include <unistd.h>

#include <array>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "comm/checks.hpp"
#include "comm/environment.hpp"
#include "comm/factories.hpp"
#include "comm/mpi/mpi_communicator.hpp"
#include "comm/nccl/comm_kernels.hpp"
#include "comm/nccl/device_stager.hpp"
#include "dpl/profile/phase_timer.hpp"

#define DPL_NCCL_CHECK(call, what)                                                                     \
  do {                                                                                                 \
    const ncclResult_t dpl_nccl_rc_ = (call);                                                          \
    if (dpl_nccl_rc_ != ncclSuccess)                                                                   \
      DPL_FAIL((what), ": NCCL call ", #call, " failed: ", ncclGetErrorString(dpl_nccl_rc_), " (",     \
               ncclGetLastError(nullptr), ")");                                                        \
  } while (0)

namespace dpl::comm::detail {

using backend::cuda_detail::DeviceGuard;

namespace {

// --- 16-bit sums for MPI ---------------------------------------------------------------------------
// MPI has no bfloat16/float16 reduction; the inter-node step of a 16-bit gradient reduction adds
// them in float and rounds back to nearest even, as NCCL does.

float bf16_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

void sum_fp16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const _Float16*>(in);
  auto* b = static_cast<_Float16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = static_cast<_Float16>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

MPI_Op sum_op(DType dtype) {
  static MPI_Op bf16 = MPI_OP_NULL, fp16 = MPI_OP_NULL;
  if (dtype == kBFloat16) {
    if (bf16 == MPI_OP_NULL) MPI_Op_create(&sum_bf16, 1, &bf16);
    return bf16;
  }
  if (dtype == kFloat16) {
    if (fp16 == MPI_OP_NULL) MPI_Op_create(&sum_fp16, 1, &fp16);
    return fp16;
  }
  return MPI_SUM;
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kFloat16: return ncclFloat16;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
  }
  DPL_FAIL("nccl_type: no NCCL type for dtype ", dtype);
}

/// Whether MPI can read device memory: DPL_MPI_CUDA_AWARE=0/1 decides when set, else
/// MPIX_Query_cuda_support() where the MPI has it (Open MPI's mpi-ext.h), else no.
bool mpi_cuda_aware() {
  if (const char* v = std::getenv("DPL_MPI_CUDA_AWARE")) {
    if (*v) return std::strcmp(v, "0") != 0;
  }
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

std::uint64_t fnv1a(const char* s, std::size_t n) {
  std::uint64_t h = 14695981039346656037ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(s[i]);
    h *= 1099511628211ull;
  }
  return h;
}

enum class Mode { kPureNccl, kSingleNode, kHierarchical, kTwoDimensional, kFlat };

Mode mode_of(const std::string& name) {
  if (name == "pure_nccl") return Mode::kPureNccl;
  if (name == "single_node") return Mode::kSingleNode;
  if (name == "hierarchical") return Mode::kHierarchical;
  if (name == "two_dimensional") return Mode::kTwoDimensional;
  DPL_CHECK(name == "flat", "make_device: unknown device communicator '", name, "'");
  return Mode::kFlat;
}

// The five sub-phases of hierarchical and two_dimensional, and the three of flat, in the order
// every rank reports them.
enum Ev { kIntraBegin, kIntraEnd, kD2hBegin, kD2hEnd, kH2dBegin, kH2dEnd, kGatherBegin, kGatherEnd, kEvents };

class DeviceCommunicator final : public Communicator {
 public:
  DeviceCommunicator(std::unique_ptr<Communicator> host, const std::string& name, const CommOptions& options)
      : mode_(mode_of(name)), name_(name) {
    mpi_ = dynamic_cast<MpiCommunicator*>(host.get());
    DPL_CHECK(mpi_ != nullptr, "make_device: expected an MPI communicator for '", name, "'");
    topology_ = host->topology();
    // Refused on every rank alike (same topology everywhere), after the collective creation.
    DPL_CHECK(mode_ != Mode::kSingleNode || topology_.inter_size == 1, "create_communicator('single_node'): the job spans ",
              topology_.inter_size, " nodes (inter_size ", topology_.inter_size,
              "), but single_node runs NCCL within one node only; use hierarchical, two_dimensional or pure_nccl");
    staged_ = make_staging(std::move(host));
    cuda_aware_ = mpi_cuda_aware();
  }

  ~DeviceCommunicator() override {
    if (device_ < 0) return;
    // At exit the runtime may be gone already: nothing here may throw.
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    if (world_nccl_) ncclCommDestroy(world_nccl_);
    if (intra_nccl_) ncclCommDestroy(intra_nccl_);
    for (auto& set : events_)
      for (cudaEvent_t e : set) cudaEventDestroy(e);
    cudaEventDestroy(compute_ready_);
    cudaEventDestroy(comm_done_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return name_; }

  void set_synchronized(bool on) override {
    synchronized_ = on;
    staged_->set_synchronized(on);
  }

  // --- allreduce -------------------------------------------------------------------------------

  void allreduce(Tensor& buf, ReduceOp op) override {
    if (!on_device(buf)) return host_call([&] { staged_->allreduce(buf, op); });
    check_buffer("allreduce", name_, buf, "buf", Use::kReduce, true);
    check_op("allreduce", name_, buf, op);
    bind(buf, "allreduce");
    reduce_on_device(buf, op == ReduceOp::kMean);
  }

  void allreduce_narrowed(Tensor& buf, ReduceOp op, DType wire_dtype) override {
    // flat's point is MPI over the whole buffer; it reduces in float32 only.
    if (mode_ == Mode::kFlat) return Communicator::allreduce_narrowed(buf, op, wire_dtype);
    check_buffer("allreduce", name_, buf, "buf", Use::kReduce, true);
    bind(buf, "allreduce");
    const std::int64_t n = buf.numel();
    if (n == 0) {
      last_phases_.clear();
      return;
    }
    if (!half_.defined() || half_.numel() < n || half_.dtype() != wire_dtype)
      half_ = Tensor::empty({n}, TensorOptions(wire_dtype, buf.device()));
    Tensor half = half_.view_range(0, {n});
    cudaStream_t compute = backend::cuda_stream(device_);
    launch_cast_to_16bit(buf.data<float>(), half.raw_data(), wire_dtype, n, device_, compute);
    if (!reduce_on_device(half, false)) {
      // Ranks share a GPU, so NCCL cannot run: the MPI path over pinned memory, in float32.
      host_call([&] { staged_->allreduce(buf, op); });
      return;
    }
    const float divisor = op == ReduceOp::kMean ? static_cast<float>(size()) : 1.0f;
    launch_cast_from_16bit(half.raw_data(), wire_dtype, buf.data<float>(), n, divisor, device_, compute);
  }

  // --- the other collectives ----------------------------------------------------------------------

  void broadcast(Tensor& buf, int root) override {
    if (!on_device(buf)) return host_call([&] { staged_->broadcast(buf, root); });
    check_buffer("broadcast", name_, buf, "buf", Use::kMove, true);
    check_root("broadcast", name_, root, size());
    bind(buf, "broadcast");
    if (!world_usable()) return host_call([&] { staged_->broadcast(buf, root); });
    begin();
    DPL_NCCL_CHECK(ncclBroadcast(buf.raw_data(), buf.raw_data(), buf.nbytes(), ncclChar, root, world_nccl_, stream_),
                   what_call("broadcast", name_));
    end();
  }

  void allgather(const Tensor& send, Tensor& recv) override {
    if (!on_device(send) || !on_device(recv)) return host_call([&] { staged_->allgather(send, recv); });
    check_allgather(name_, send, recv, rank(), size(), true);
    bind(send, "allgather");
    bind(recv, "allgather");
    if (!world_usable()) return host_call([&] { staged_->allgather(send, recv); });
    begin();
    DPL_NCCL_CHECK(ncclAllGather(send.raw_data(), recv.raw_data(), send.nbytes(), ncclChar, world_nccl_, stream_),
                   what_call("allgather", name_));
    end();
  }

  void reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op) override {
    if (!on_device(send) || !on_device(recv)) return host_call([&] { staged_->reduce_scatter(send, recv, op); });
    check_reduce_scatter(name_, send, recv, size(), true);
    check_op("reduce_scatter", name_, send, op);
    bind(send, "reduce_scatter");
    bind(recv, "reduce_scatter");
    if (!world_usable()) return host_call([&] { staged_->reduce_scatter(send, recv, op); });
    begin();
    DPL_NCCL_CHECK(ncclReduceScatter(send.raw_data(), recv.raw_data(), static_cast<std::size_t>(recv.numel()),
                                     nccl_type(recv.dtype()), ncclSum, world_nccl_, stream_),
                   what_call("reduce_scatter", name_));
    end();
    if (op == ReduceOp::kMean)
      launch_divide(recv.data<float>(), recv.numel(), static_cast<float>(size()), device_, backend::cuda_stream(device_));
  }

  void barrier() override { staged_->barrier(); }

  // NCCL has no tags: messages between two ranks match in the order they are posted. The host
  // waits for the transfer, as the blocking MPI send and recv do.
  void send(const Tensor& buf, int dest, int tag) override {
    if (!on_device(buf)) return staged_->send(buf, dest, tag);
    check_buffer("send", name_, buf, "buf", Use::kMove, true);
    check_peer("send", name_, dest, rank(), size(), tag, tag_upper_bound());
    bind(buf, "send");
    if (!world_usable()) return staged_->send(buf, dest, tag);
    begin();
    DPL_NCCL_CHECK(ncclSend(buf.raw_data(), buf.nbytes(), ncclChar, dest, world_nccl_, stream_), what_call("send", name_));
    end();
    DPL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void recv(Tensor& buf, int source, int tag) override {
    if (!on_device(buf)) return staged_->recv(buf, source, tag);
    check_buffer("recv", name_, buf, "buf", Use::kMove, true);
    check_peer("recv", name_, source, rank(), size(), tag, tag_upper_bound());
    bind(buf, "recv");
    if (!world_usable()) return staged_->recv(buf, source, tag);
    begin();
    DPL_NCCL_CHECK(ncclRecv(buf.raw_data(), buf.nbytes(), ncclChar, source, world_nccl_, stream_), what_call("recv", name_));
    end();
    DPL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  static bool on_device(const Tensor& t) { return t.defined() && t.device().is_cuda(); }

  template <typename F>
  void host_call(F&& f) {
    f();
    last_phases_ = staged_->last_phases();
  }

  // The first device buffer binds the communicator to its GPU: the stream, events and NCCL
  // communicators are created there. Later buffers must be on the same GPU.
  void bind(const Tensor& t, const char* collective) {
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
    for (auto& set : events_)
      for (cudaEvent_t& e : set) DPL_CUDA_CHECK(cudaEventCreate(&e));
    enable_peer_access(d);
    device_ = d;
    stager_ = std::make_unique<DeviceStager>(d);
  }

  // Lets this GPU read and write the other GPUs of the machine directly where the hardware
  // allows (cudaMemcpyPeer and kernels then skip the host); NCCL sets up its own paths anyway.
  static void enable_peer_access(int d) {
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

  // An NCCL communicator over the MPI group, or null when NCCL cannot run there because two of
  // its ranks share a GPU (NCCL needs one rank per GPU; the callers then use MPI). Collective
  // over the group; every rank sees the same table, so all agree.
  ncclComm_t make_nccl(MPI_Comm group, const char* what) {
    int grank = 0, gsize = 1;
    MPI_Comm_rank(group, &grank);
    MPI_Comm_size(group, &gsize);
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    char bus[64] = {0};
    DPL_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device_));
    std::array<std::uint64_t, 2> mine = {fnv1a(host, std::strlen(host)), fnv1a(bus, std::strlen(bus))};
    std::vector<std::uint64_t> all(static_cast<std::size_t>(2 * gsize));
    DPL_MPI_CHECK(MPI_Allgather(mine.data(), 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, group),
                  what_call(what, name_) + ": MPI_Allgather");
    for (int i = 0; i < gsize; ++i)
      for (int j = i + 1; j < gsize; ++j)
        if (all[2 * i] == all[2 * j] && all[2 * i + 1] == all[2 * j + 1]) return nullptr;
    ncclUniqueId id;
    if (grank == 0) DPL_NCCL_CHECK(ncclGetUniqueId(&id), what_call(what, name_));
    DPL_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, group), what_call(what, name_) + ": MPI_Bcast");
    DeviceGuard guard(device_);
    ncclComm_t c = nullptr;
    DPL_NCCL_CHECK(ncclCommInitRank(&c, gsize, id, grank), what_call(what, name_));
    return c;
  }

  bool world_usable() {
    if (!world_tried_) {
      world_tried_ = true;
      world_nccl_ = make_nccl(mpi_->world_comm(), "NCCL setup");
    }
    return world_nccl_ != nullptr;
  }

  bool intra_usable() {
    if (!intra_tried_) {
      intra_tried_ = true;
      intra_nccl_ = make_nccl(mpi_->intra_comm(), "NCCL setup");
    }
    return intra_nccl_ != nullptr;
  }

  // Our stream starts after the compute stream's work queued so far.
  void begin() {
    cudaStream_t compute = backend::cuda_stream(device_);
    DPL_CUDA_CHECK(cudaEventRecord(compute_ready_, compute));
    DPL_CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_ready_, 0));
  }

  // The compute stream continues after our stream's work (and a buffer freed later is reused in
  // compute-stream order, so only after we are done with it).
  void end() {
    DPL_CUDA_CHECK(cudaEventRecord(comm_done_, stream_));
    DPL_CUDA_CHECK(cudaStreamWaitEvent(backend::cuda_stream(device_), comm_done_, 0));
  }

  void record(int ev, cudaStream_t s) { DPL_CUDA_CHECK(cudaEventRecord(events_[cur_][ev], s)); }

  // The inter-node step over `group` on n elements at data: CUDA-aware MPI reads device memory
  // directly (after our stream's work); otherwise the pipelined staging. Leaves our stream
  // ordered after the results. Returns the seconds spent in MPI.
  double mpi_step(MPI_Comm group, void* data, std::int64_t n, DType dtype) {
    const MPI_Datatype type = mpi_datatype(dtype);
    const MPI_Op op = sum_op(dtype);
    const std::string what = what_call("allreduce", name_) + ": MPI_Allreduce";
    auto reduce = [&](void* p, std::int64_t count) {
      for_each_chunk(count, [&](std::int64_t off, int c) {
        DPL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(p) + off * static_cast<std::int64_t>(dtype_size(dtype)),
                                    c, type, op, group),
                      what);
      });
    };
    // A user-defined MPI_Op (the 16-bit sums) runs on the host and cannot read device memory.
    if (cuda_aware_ && op == MPI_SUM) {
      record(kD2hBegin, stream_);
      record(kD2hEnd, stream_);
      DPL_CUDA_CHECK(cudaStreamSynchronize(stream_));  // MPI reads what our stream wrote
      const double t0 = profile::now_seconds();
      reduce(data, n);
      const double s = profile::now_seconds() - t0;
      record(kH2dBegin, stream_);
      record(kH2dEnd, stream_);
      return s;
    }
    StagingEvents ev{events_[cur_][kD2hBegin], events_[cur_][kD2hEnd], events_[cur_][kH2dBegin], events_[cur_][kH2dEnd]};
    const double s = stager_->run(data, n, dtype_size(dtype), stream_, reduce, ev);
    DPL_CUDA_CHECK(cudaStreamWaitEvent(stream_, stager_->done(), 0));
    return s;
  }

  // In place over a device buffer (float32, int32, int64, or a 16-bit type from allreduce_narrowed):
  // the sum over all ranks, divided by size() when mean. Returns false when the buffer was 16-bit
  // and NCCL could not run, in which case nothing was done (the caller falls back).
  bool reduce_on_device(Tensor& buf, bool mean) {
    const bool sixteen = buf.dtype() == kBFloat16 || buf.dtype() == kFloat16;
    const std::int64_t n = buf.numel();
    void* data = buf.raw_data();
    const ncclDataType_t type = nccl_type(buf.dtype());
    const std::string what = what_call("allreduce", name_);
    // With one node, hierarchical and two_dimensional are one allreduce among the node's GPUs:
    // they take pure_nccl's path (no sub-phase events), which keeps them at raw NCCL's speed.
    const bool world_algo = mode_ == Mode::kPureNccl || mode_ == Mode::kSingleNode ||
                            (mode_ != Mode::kFlat && inter_size() == 1 && world_usable());
    if (n == 0) {
      last_phases_.clear();
      return true;
    }

    if (world_algo) {
      DPL_CHECK(world_usable(), what, ": NCCL needs one GPU per rank, but ranks of this job share a GPU (",
                size(), " ranks); choose the GPU with select_device_for_local_rank on distinct GPUs, or use "
                "hierarchical, which falls back to MPI");
    } else if (mode_ != Mode::kFlat && !intra_usable()) {
      // Ranks of a node share a GPU: the host algorithm over pinned memory, in float32.
      if (sixteen) return false;
      host_call([&] { staged_->allreduce(buf, mean ? ReduceOp::kMean : ReduceOp::kSum); });
      return true;
    }

    begin();
    record(kIntraBegin, stream_);
    double inter_seconds = 0.0;
    bool staged_phases = false;
    if (world_algo) {
      DPL_NCCL_CHECK(ncclAllReduce(data, data, static_cast<std::size_t>(n), type, ncclSum, world_nccl_, stream_), what);
    } else if (mode_ == Mode::kFlat) {
      record(kIntraEnd, stream_);
      inter_seconds = mpi_step(mpi_->world_comm(), data, n, buf.dtype());
      staged_phases = true;
      record(kGatherBegin, stream_);
    } else if (inter_size() == 1) {
      // One node: reduce-scatter and all-gather inside it are an allreduce, which NCCL fuses.
      DPL_NCCL_CHECK(ncclAllReduce(data, data, static_cast<std::size_t>(n), type, ncclSum, intra_nccl_, stream_), what);
      record(kIntraEnd, stream_);
      for (int e : {kD2hBegin, kD2hEnd, kH2dBegin, kH2dEnd, kGatherBegin}) record(e, stream_);
      staged_phases = true;
    } else if (mode_ == Mode::kHierarchical) {
      if (intra_size() > 1)
        DPL_NCCL_CHECK(ncclReduce(data, data, static_cast<std::size_t>(n), type, ncclSum, 0, intra_nccl_, stream_), what);
      record(kIntraEnd, stream_);
      if (intra_rank() == 0) {
        inter_seconds = mpi_step(mpi_->inter_comm(), data, n, buf.dtype());
      } else {
        for (int e : {kD2hBegin, kD2hEnd, kH2dBegin, kH2dEnd}) record(e, stream_);
      }
      record(kGatherBegin, stream_);
      if (intra_size() > 1)
        DPL_NCCL_CHECK(ncclBroadcast(data, data, static_cast<std::size_t>(n), type, 0, intra_nccl_, stream_), what);
      staged_phases = true;
    } else {
      inter_seconds = two_dimensional(buf, type, what);
      staged_phases = true;
    }
    record(kGatherEnd, stream_);
    end();
    if (mean && !sixteen)
      launch_divide(static_cast<float*>(data), n, static_cast<float>(size()), device_, backend::cuda_stream(device_));
    publish_phases(staged_phases, inter_seconds);
    return true;
  }

  // Reduce-scatter in the node, each slice across nodes, all-gather in the node. A length not
  // divisible by the node size goes through a zero-padded scratch buffer.
  double two_dimensional(Tensor& buf, ncclDataType_t type, const std::string& what) {
    const int p = intra_size();
    const std::int64_t n = buf.numel();
    const std::size_t esize = dtype_size(buf.dtype());
    const std::int64_t slice = (n + p - 1) / p;
    char* work = static_cast<char*>(buf.raw_data());
    const bool padded = slice * p != n;
    if (padded) {
      const std::int64_t need = static_cast<std::int64_t>(slice * p * esize);
      if (!pad_.defined() || pad_.nbytes() < static_cast<std::size_t>(need))
        pad_ = Tensor::empty({(need + 3) / 4}, TensorOptions(kFloat32, buf.device()));
      work = static_cast<char*>(pad_.raw_data());
      DPL_CUDA_CHECK(cudaMemcpyAsync(work, buf.raw_data(), static_cast<std::size_t>(n) * esize, cudaMemcpyDeviceToDevice, stream_));
      DPL_CUDA_CHECK(cudaMemsetAsync(work + n * esize, 0, static_cast<std::size_t>(slice * p - n) * esize, stream_));
    }
    char* mine = work + static_cast<std::size_t>(intra_rank() * slice) * esize;
    if (p > 1)
      DPL_NCCL_CHECK(ncclReduceScatter(work, mine, static_cast<std::size_t>(slice), type, ncclSum, intra_nccl_, stream_), what);
    record(kIntraEnd, stream_);
    const double s = mpi_step(mpi_->inter_comm(), mine, slice, buf.dtype());
    record(kGatherBegin, stream_);
    if (p > 1)
      DPL_NCCL_CHECK(ncclAllGather(mine, work, static_cast<std::size_t>(slice), type, intra_nccl_, stream_), what);
    if (padded)
      DPL_CUDA_CHECK(cudaMemcpyAsync(buf.raw_data(), work, static_cast<std::size_t>(n) * esize, cudaMemcpyDeviceToDevice, stream_));
    return s;
  }

  // Sub-phase times come from CUDA events. Reading this call's events would wait for the device,
  // so by default last_phases() reports the previous call's times (its events are done by now;
  // zeros after the first call) under this call's names; with set_synchronized(true) the host
  // waits for this call and reports its own times.
  void publish_phases(bool staged, double inter_seconds) {
    if (!staged) {
      last_phases_.clear();
      return;
    }
    const int show = synchronized_ ? cur_ : 1 - cur_;
    if (synchronized_) DPL_CUDA_CHECK(cudaEventSynchronize(events_[cur_][kGatherEnd]));
    // The previous call may still be running when the host queues calls back to back: waiting
    // for it here would stall every call by a launch latency (measured: 4% of a 102 MB
    // allreduce on two H200s). Its times are read only once it is done; until then the last
    // times read stand.
    std::array<double, 5>& t = shown_;
    if (have_[show]) {
      auto& e = events_[show];
      const cudaError_t done = cudaEventQuery(e[kGatherEnd]);
      if (done != cudaSuccess && done != cudaErrorNotReady) DPL_CUDA_CHECK(done);
      auto span = [&](int a, int b) {
        float ms = 0.f;
        DPL_CUDA_CHECK(cudaEventElapsedTime(&ms, e[a], e[b]));
        return static_cast<double>(ms) * 1e-3;
      };
      if (done == cudaSuccess) {
        t = {span(kIntraBegin, kIntraEnd), span(kD2hBegin, kD2hEnd), inter_[show], span(kH2dBegin, kH2dEnd),
             span(kGatherBegin, kGatherEnd)};
      }
    }
    have_[cur_] = true;
    inter_[cur_] = inter_seconds;
    cur_ = 1 - cur_;
    if (mode_ == Mode::kFlat) {
      last_phases_ = {SubPhase{"d2h", t[1]}, SubPhase{"inter_allreduce", t[2]}, SubPhase{"h2d", t[3]}};
    } else {
      last_phases_ = {SubPhase{"intra_reduce", t[0]}, SubPhase{"d2h", t[1]}, SubPhase{"inter_allreduce", t[2]},
                      SubPhase{"h2d", t[3]}, SubPhase{"intra_gather", t[4]}};
    }
  }

  const Mode mode_;
  const std::string name_;
  std::unique_ptr<Communicator> staged_;  // host buffers, and device buffers where NCCL cannot run
  MpiCommunicator* mpi_ = nullptr;        // inside staged_: the MPI groups
  bool cuda_aware_ = false;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr, comm_done_ = nullptr;
  std::array<std::array<cudaEvent_t, kEvents>, 2> events_{};  // this call's and the previous call's
  std::array<bool, 2> have_{false, false};
  std::array<double, 2> inter_{0.0, 0.0};
  std::array<double, 5> shown_{0, 0, 0, 0, 0};  // the sub-phase times last read from events
  int cur_ = 0;
  bool world_tried_ = false, intra_tried_ = false;
  ncclComm_t world_nccl_ = nullptr, intra_nccl_ = nullptr;
  std::unique_ptr<DeviceStager> stager_;
  Tensor half_, pad_;  // 16-bit gradients; the padded buffer of two_dimensional
};

}  // namespace

std::unique_ptr<Communicator> make_device(std::unique_ptr<Communicator> host, const std::string& name,
                                          const CommOptions& options) {
  return std::make_unique<DeviceCommunicator>(std::move(host), name, options);
}

}  // namespace dpl::comm::detail
