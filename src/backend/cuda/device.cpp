// Devices of the CUDA backend: the device count, error reporting, the per-device state and its
// registry, the memory and stream kernels, and what core's public CUDA API calls.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_profiler_api.h>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda_api.hpp"
#include "backend/kernels.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/core/device.hpp"
#include "dpl/core/error.hpp"
#include "dpl/core/settings.hpp"

namespace dpl {
namespace backend {

namespace {
/// Most GPUs per process the backend keeps state for.
constexpr int kMaxDevices = 64;
}  // namespace

int cuda_api::device_count() noexcept {
  // Any runtime error (no driver, driver too old, no device) reads as "no GPU".
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the error so that later calls start clean
      return 0;
    }
    return n;
  }();
  return count;
}

namespace cuda_detail {

namespace {
int current_device_or_minus_one() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) return -1;
  return d;
}
}  // namespace

void throw_cuda_error(const char* call, cudaError_t err) {
  const int device = current_device_or_minus_one();
  cudaGetLastError();  // a non-sticky error must not resurface in an unrelated later check
  DPL_FAIL("CUDA call ", call, " failed on cuda:", device, ": ", cudaGetErrorName(err), " (",
           cudaGetErrorString(err), ")");
}

void throw_cublas_error(const char* call, cublasStatus_t status) {
  const int device = current_device_or_minus_one();
  DPL_FAIL("cuBLAS call ", call, " failed on cuda:", device, ": ", cublasGetStatusName(status), " (",
           cublasGetStatusString(status), ")");
}

DeviceGuard::DeviceGuard(int device) : device_(device) {
  DPL_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device_) DPL_CUDA_CHECK(cudaSetDevice(device_));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
}

namespace {
std::array<std::atomic<int>, kMaxDevices> g_sm_count{};
std::array<std::atomic<int>, kMaxDevices> g_compute_capability{};
std::array<std::atomic<int>, kMaxDevices> g_shared_per_block{};

// One attribute of device, 0 when the device does not answer.
int attribute(cudaDeviceAttr what, int device) {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, what, device) == cudaSuccess) return v;
  cudaGetLastError();
  return 0;
}

// query()'s positive answer for device, asked once and kept in cache[device]; 0 for a device out
// of range or one that does not answer, which is not kept: the next call asks again.
template <typename Query>
int cached_per_device(std::array<std::atomic<int>, kMaxDevices>& cache, int device, Query query) {
  if (device < 0 || device >= kMaxDevices) return 0;
  int v = cache[device].load(std::memory_order_relaxed);
  if (v > 0) return v;
  v = query();
  if (v <= 0) return 0;
  cache[device].store(v, std::memory_order_relaxed);
  return v;
}
}  // namespace

int sm_count(int device) {
  const int n =
      cached_per_device(g_sm_count, device, [&] { return attribute(cudaDevAttrMultiProcessorCount, device); });
  return n > 0 ? n : 1;
}

int compute_capability(int device) {
  return cached_per_device(g_compute_capability, device, [&] {
    const int major = attribute(cudaDevAttrComputeCapabilityMajor, device);
    return major > 0 ? 10 * major + attribute(cudaDevAttrComputeCapabilityMinor, device) : 0;
  });
}

int shared_memory_per_block(int device) {
  return cached_per_device(g_shared_per_block, device,
                           [&] { return attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device); });
}

int resident_blocks(const void* kernel, int threads, std::size_t shared_bytes, int device) {
  struct Entry {
    const void* kernel;
    int threads;
    std::size_t shared_bytes;
    int device, blocks;
  };
  static std::mutex mutex;
  static std::vector<Entry> known;  // a few dozen kernel shapes in a whole program
  std::lock_guard<std::mutex> lock(mutex);
  for (const Entry& e : known)
    if (e.kernel == kernel && e.threads == threads && e.shared_bytes == shared_bytes && e.device == device)
      return e.blocks;
  int blocks = 0;
  {
    DeviceGuard guard(device);
    DPL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared_bytes));
  }
  blocks = std::max(blocks, 1);
  known.push_back({kernel, threads, shared_bytes, device, blocks});
  return blocks;
}

}  // namespace cuda_detail

// --- the registry of per-device state -----------------------------------------------------

namespace {
std::array<std::atomic<CudaDevice*>, kMaxDevices> g_devices{};
std::mutex g_devices_mutex;

// -1 until first asked: DPL_CUDA_TF32 is read then, not while the library loads, where a malformed
// variable could only end the process without a message.
std::atomic<int> g_allow_tf32{-1};

bool tf32_allowed() {
  int v = g_allow_tf32.load(std::memory_order_relaxed);
  if (v < 0) {
    int unset = -1;
    const int from_env = settings().cuda_tf32 ? 1 : 0;
    v = g_allow_tf32.compare_exchange_strong(unset, from_env) ? from_env : g_allow_tf32.load();
  }
  return v == 1;
}

void check_device(int device, const char* what) {
  const int n = cuda_api::device_count();
  DPL_CHECK(n > 0, what, ": device cuda:", device, " was requested, but no GPU is available "
            "(the CUDA runtime reports none, or the driver is missing or too old)");
  DPL_CHECK(device >= 0 && device < n && device < kMaxDevices, what, ": device cuda:", device,
            " does not exist; this machine has ", n, " GPU(s), cuda:0 to cuda:", n - 1);
}
}  // namespace

CudaDevice& CudaDevice::get(int device) {
  if (device >= 0 && device < kMaxDevices) {
    if (CudaDevice* k = g_devices[device].load(std::memory_order_acquire)) return *k;
  }
  check_device(device, "cuda");
  std::lock_guard<std::mutex> lock(g_devices_mutex);
  CudaDevice* k = g_devices[device].load(std::memory_order_relaxed);
  if (k == nullptr) {
    // Never deleted: Storage objects of static tensors free their blocks during exit.
    k = new CudaDevice(device);
    g_devices[device].store(k, std::memory_order_release);
  }
  return *k;
}

CudaDevice* CudaDevice::get_if_created(int device) noexcept {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return g_devices[device].load(std::memory_order_acquire);
}

CudaDevice::CudaDevice(int device)
    : device_(device), allocator_(std::make_unique<cuda_detail::CachingAllocator>(device)) {
  cuda_detail::DeviceGuard guard(device_);
  // Non-blocking: the legacy default stream, which other libraries may use, must not serialise
  // with our work.
  DPL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DPL_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  constexpr std::size_t counters = 1 + kFoldCounters;
  DPL_CUDA_CHECK(cudaMalloc(&scratch_.partials, sizeof(double) * kMaxReduceBlocks + sizeof(unsigned) * counters));
  scratch_.counter = reinterpret_cast<unsigned*>(scratch_.partials + kMaxReduceBlocks);
  scratch_.fold_counters = scratch_.counter + 1;
  DPL_CUDA_CHECK(cudaMemset(scratch_.counter, 0, sizeof(unsigned) * counters));
  DPL_CUDA_CHECK(cudaDeviceSynchronize());  // the memset above ran on the legacy stream
}

cublasHandle_t CudaDevice::cublas() {
  DPL_CHECK(!routed_here(), "cuda:", device_, ": cuBLAS work is bound to the compute stream and cannot be queued ",
            "from a thread whose work is routed to a side stream (the overlapped allreduce's)");
  std::lock_guard<std::mutex> lock(cublas_mutex_);
  const bool tf32 = tf32_allowed();
  if (cublas_ == nullptr) {
    cuda_detail::DeviceGuard guard(device_);
    DPL_CUBLAS_CHECK(cublasCreate(&cublas_));
    DPL_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // Our own workspace keeps cuBLAS from allocating behind the caching allocator's back.
    cublas_workspace_ = allocator_->allocate(kCublasWorkspace);
    DPL_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace));
    DPL_CUBLAS_CHECK(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST));
  }
  DPL_CUBLAS_CHECK(cublasSetMathMode(cublas_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  return cublas_;
}

void* CudaDevice::cublas_workspace() {
  cublas();  // creates the workspace with the handle
  return cublas_workspace_;
}

cublasLtHandle_t CudaDevice::cublas_lt() {
  cublas();  // the same stream rule, and the shared workspace
  std::lock_guard<std::mutex> lock(cublas_mutex_);
  if (cublas_lt_ == nullptr) {
    cuda_detail::DeviceGuard guard(device_);
    DPL_CUBLAS_CHECK(cublasLtCreate(&cublas_lt_));
  }
  return cublas_lt_;
}

const CudaDevice::ReduceScratch& CudaDevice::scratch() const {
  DPL_CHECK(!routed_here(), "cuda:", device_, ": the one-launch reductions share the compute stream's scratch and ",
            "cannot run on a thread whose work is routed to a side stream (the overlapped allreduce's)");
  return scratch_;
}

std::vector<cudaStream_t> CudaDevice::side_streams() const {
  std::lock_guard<std::mutex> lock(side_mutex_);
  return side_streams_;
}

void CudaDevice::add_side_stream(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(side_mutex_);
  side_streams_.push_back(s);
}

void CudaDevice::remove_side_stream(cudaStream_t s) noexcept {
  std::lock_guard<std::mutex> lock(side_mutex_);
  for (auto it = side_streams_.begin(); it != side_streams_.end(); ++it)
    if (*it == s) {
      side_streams_.erase(it);
      return;
    }
}

cudaStream_t cuda_stream(int device) { return CudaDevice::get(device).stream(); }

// --- memory and stream kernels -----------------------------------------------------------------

namespace {

void* allocate_cuda(Device device, std::size_t nbytes) { return CudaDevice::get(device.index).allocator().allocate(nbytes); }

void deallocate_cuda(Device device, void* p) {
  // Runs from Storage destructors, possibly during exit: the device's state exists (it made p).
  if (CudaDevice* d = CudaDevice::get_if_created(device.index)) d->allocator().deallocate(p);
}

void copy_bytes_cuda(Device device, void* dst, const void* src, std::size_t nbytes) {
  if (nbytes == 0 || dst == src) return;
  CudaDevice& d = CudaDevice::get(device.index);
  cuda_detail::DeviceGuard guard(d.device());
  DPL_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, d.stream()));
}

void synchronize_cuda(Device device) {
  CudaDevice& d = CudaDevice::get(device.index);
  cuda_detail::DeviceGuard guard(d.device());
  DPL_CUDA_CHECK(cudaStreamSynchronize(d.stream()));
}

}  // namespace

DPL_REGISTER_KERNEL(allocate, kCuda, allocate_cuda);
DPL_REGISTER_KERNEL(deallocate, kCuda, deallocate_cuda);
DPL_REGISTER_KERNEL(copy_bytes, kCuda, copy_bytes_cuda);
DPL_REGISTER_KERNEL(synchronize, kCuda, synchronize_cuda);

// --- what core's public API calls (devices checked there) --------------------------------------

namespace cuda_api {

cuda::MemoryStats memory_stats(int device) {
  CudaDevice* d = CudaDevice::get_if_created(device);
  return d ? d->allocator().stats() : cuda::MemoryStats{};
}

std::size_t driver_free_memory(int device) {
  int previous = 0;
  DPL_CUDA_CHECK(cudaGetDevice(&previous));
  DPL_CUDA_CHECK(cudaSetDevice(device));
  std::size_t free = 0, total = 0;
  const cudaError_t rc = cudaMemGetInfo(&free, &total);
  DPL_CUDA_CHECK(cudaSetDevice(previous));
  DPL_CUDA_CHECK(rc);
  return free;
}

void reset_peak(int device) {
  if (CudaDevice* d = CudaDevice::get_if_created(device)) d->allocator().reset_peak();
}

void empty_cache(int device) {
  if (CudaDevice* d = CudaDevice::get_if_created(device)) d->allocator().empty_cache();
}

bool caching_enabled() { return cuda_detail::caching_enabled_by_env(); }

void set_device(int device) { DPL_CUDA_CHECK(cudaSetDevice(device)); }

void profiler_capture(bool on) { DPL_CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop()); }

int current_device() {
  int d = -1;
  DPL_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void synchronize(int device) { backend::synchronize(Device::cuda(device)); }

void set_allow_tf32(bool on) { g_allow_tf32.store(on ? 1 : 0, std::memory_order_relaxed); }

bool allow_tf32() { return tf32_allowed(); }

}  // namespace cuda_api
}  // namespace backend
}  // namespace dpl
