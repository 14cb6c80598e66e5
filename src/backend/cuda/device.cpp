// Devices of the CUDA backend: the device count, error reporting, the per-device backend
// registry, and the public dpl::cuda device API.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/core/device.hpp"
#include "dpl/core/error.hpp"

namespace dpl {

int cuda_device_count() {
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

namespace backend {
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
constexpr int kMaxDevices = 64;
std::array<std::atomic<int>, kMaxDevices> g_sm_count{};
}  // namespace

int sm_count(int device) {
  if (device < 0 || device >= kMaxDevices) return 1;
  int n = g_sm_count[device].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n <= 0) {
      cudaGetLastError();
      n = 1;
    }
    g_sm_count[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace cuda_detail

// --- the registry of per-device backends -----------------------------------------------------

namespace {
constexpr int kMaxDevices = 64;
std::array<std::atomic<CudaKernels*>, kMaxDevices> g_kernels{};
std::mutex g_kernels_mutex;

std::atomic<bool> g_allow_tf32{[] {
  const char* v = std::getenv("DPL_CUDA_TF32");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}()};

void check_device(int device, const char* what) {
  const int n = cuda_device_count();
  DPL_CHECK(n > 0, what, ": device cuda:", device, " was requested, but no GPU is available "
            "(the CUDA runtime reports none, or the driver is missing or too old)");
  DPL_CHECK(device >= 0 && device < n && device < kMaxDevices, what, ": device cuda:", device,
            " does not exist; this machine has ", n, " GPU(s), cuda:0 to cuda:", n - 1);
}
}  // namespace

CudaKernels& CudaKernels::get(int device) {
  if (device >= 0 && device < kMaxDevices) {
    if (CudaKernels* k = g_kernels[device].load(std::memory_order_acquire)) return *k;
  }
  check_device(device, "cuda");
  std::lock_guard<std::mutex> lock(g_kernels_mutex);
  CudaKernels* k = g_kernels[device].load(std::memory_order_relaxed);
  if (k == nullptr) {
    // Never deleted: Storage objects of static tensors free their blocks during exit.
    k = new CudaKernels(device);
    g_kernels[device].store(k, std::memory_order_release);
  }
  return *k;
}

CudaKernels* CudaKernels::get_if_created(int device) noexcept {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return g_kernels[device].load(std::memory_order_acquire);
}

CudaKernels::CudaKernels(int device)
    : device_(device), allocator_(std::make_unique<cuda_detail::CachingAllocator>(device)) {
  cuda_detail::DeviceGuard guard(device_);
  // Non-blocking: the legacy default stream, which other libraries may use, must not serialise
  // with our work.
  DPL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DPL_CUDA_CHECK(cudaMalloc(&scratch_.partials, sizeof(double) * kMaxReduceBlocks + sizeof(unsigned)));
  scratch_.counter = reinterpret_cast<unsigned*>(scratch_.partials + kMaxReduceBlocks);
  DPL_CUDA_CHECK(cudaMemset(scratch_.counter, 0, sizeof(unsigned)));
  DPL_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&range_host_), 2 * sizeof(std::int32_t),
                               cudaHostAllocMapped | cudaHostAllocPortable));
  DPL_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&range_dev_), range_host_, 0));
  DPL_CUDA_CHECK(cudaDeviceSynchronize());  // the memset above ran on the legacy stream
}

cublasHandle_t CudaKernels::cublas() {
  std::lock_guard<std::mutex> lock(cublas_mutex_);
  const bool tf32 = g_allow_tf32.load(std::memory_order_relaxed);
  if (cublas_ == nullptr) {
    cuda_detail::DeviceGuard guard(device_);
    DPL_CUBLAS_CHECK(cublasCreate(&cublas_));
    DPL_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // Our own workspace keeps cuBLAS from allocating behind the caching allocator's back; 32 MiB
    // is what NVIDIA recommends for Hopper.
    constexpr std::size_t kWorkspace = std::size_t{32} << 20;
    cublas_workspace_ = allocator_->allocate(kWorkspace);
    DPL_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kWorkspace));
    DPL_CUBLAS_CHECK(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST));
  }
  DPL_CUBLAS_CHECK(cublasSetMathMode(cublas_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  return cublas_;
}

void* CudaKernels::allocate(std::size_t nbytes) { return allocator_->allocate(nbytes); }

void CudaKernels::deallocate(void* p) { allocator_->deallocate(p); }

void CudaKernels::copy_bytes(void* dst, const void* src, std::size_t nbytes) {
  if (nbytes == 0 || dst == src) return;
  cuda_detail::DeviceGuard guard(device_);
  DPL_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaKernels::synchronize() {
  cuda_detail::DeviceGuard guard(device_);
  DPL_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Kernels& cuda_kernels(int index) { return CudaKernels::get(index); }

cudaStream_t cuda_stream(int device) { return CudaKernels::get(device).stream(); }

}  // namespace backend

// --- public API ------------------------------------------------------------------------------

namespace cuda {

using backend::CudaKernels;

MemoryStats memory_stats(int device) {
  backend::check_device(device, "cuda::memory_stats");
  CudaKernels* k = CudaKernels::get_if_created(device);
  return k ? k->allocator().stats() : MemoryStats{};
}

void reset_peak(int device) {
  backend::check_device(device, "cuda::reset_peak");
  if (CudaKernels* k = CudaKernels::get_if_created(device)) k->allocator().reset_peak();
}

void empty_cache(int device) {
  backend::check_device(device, "cuda::empty_cache");
  if (CudaKernels* k = CudaKernels::get_if_created(device)) k->allocator().empty_cache();
}

bool caching_enabled() { return backend::cuda_detail::caching_enabled_by_env(); }

void set_device(int device) {
  backend::check_device(device, "cuda::set_device");
  DPL_CUDA_CHECK(cudaSetDevice(device));
}

int current_device() {
  if (cuda_device_count() == 0) return -1;
  int d = -1;
  DPL_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void synchronize(int device) {
  backend::check_device(device, "cuda::synchronize");
  CudaKernels::get(device).synchronize();
}

int select_device_for_local_rank(int intra_rank) {
  DPL_CHECK(intra_rank >= 0, "cuda::select_device_for_local_rank: expected an intra-node rank >= 0, got ",
            intra_rank);
  const int n = cuda_device_count();
  if (n == 0) return -1;
  int device = intra_rank % n;
  if (const char* env = std::getenv("DPL_CUDA_DEVICE"); env != nullptr && *env != '\0') {
    std::vector<int> list;
    const std::string s(env);
    std::size_t pos = 0;
    while (pos <= s.size()) {
      const std::size_t comma = std::min(s.find(',', pos), s.size());
      const std::string item = s.substr(pos, comma - pos);
      char* end = nullptr;
      const long v = std::strtol(item.c_str(), &end, 10);
      DPL_CHECK(!item.empty() && end != nullptr && *end == '\0' && v >= 0,
                "cuda::select_device_for_local_rank: DPL_CUDA_DEVICE must be a device number or a "
                "comma-separated list of them (\"0\" or \"0,2\"), got \"", s, "\"");
      list.push_back(static_cast<int>(v));
      pos = comma + 1;
    }
    device = list[static_cast<std::size_t>(intra_rank) % list.size()];
    DPL_CHECK(device < n, "cuda::select_device_for_local_rank: DPL_CUDA_DEVICE=\"", s, "\" names cuda:", device,
              " but this machine has ", n, " GPU(s)");
  }
  DPL_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

void set_allow_tf32(bool on) { backend::g_allow_tf32.store(on, std::memory_order_relaxed); }

bool allow_tf32() { return backend::g_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace cuda
}  // namespace dpl
