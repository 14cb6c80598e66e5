// Conversions between float32, bfloat16 and float16, optionally divided by a number on the way,
// mixed precision's unscaling of gradients into float32 with a check for Inf and NaN, and the
// check alone (the non-finite guard of float32 training): each one grid-stride pass, bound by
// memory bandwidth.
#include "backend/cuda/cast.hpp"

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

namespace cuda_detail {
namespace {

// ============================================================================================
// kernels
// ============================================================================================

template <bool divide, typename S, typename D>
__global__ void cast_kernel(const S* src, D* dst, std::int64_t n, float divisor) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = to_float(src[i]);
    dst[i] = from_float<D>(divide ? v / divisor : v);
  }
}

// Every thread that meets a non-finite product writes the same 1 to the flag, so the race is
// benign and no reduction is needed; the flag is read only after the kernel.
template <typename S>
__global__ void unscale_kernel(const S* grad, float inv_scale, const float* inv_scale_at, float* master,
                               float* found_inf, std::int64_t n) {
  if (inv_scale_at != nullptr) inv_scale = *inv_scale_at;  // read when the kernel runs (recorded steps)
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = to_float(grad[i]) * inv_scale;
    master[i] = v;
    if (!isfinite(v)) *found_inf = 1.f;
  }
}

// The same benign race as unscale_kernel's: every writer stores the same 1.
template <typename T>
__global__ void flag_non_finite_kernel(const T* x, float* flag, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    if (!isfinite(to_float(x[i]))) *flag = 1.f;
}

}  // namespace

// ============================================================================================
// launchers
// ============================================================================================

void launch_cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n, float divisor,
                 int device, cudaStream_t stream) {
  if (n == 0) return;
  DeviceGuard guard(device);
  const unsigned grid = grid_for(n, kThreads, device);
  with_float_type(src_dtype, "launch_cast", [&](auto s) {
    using S = typename decltype(s)::type;
    with_float_type(dst_dtype, "launch_cast", [&](auto d) {
      using D = typename decltype(d)::type;
      const auto* from = static_cast<const S*>(src);
      auto* to = static_cast<D*>(dst);
      if (divisor == 1.f) cast_kernel<false><<<grid, kThreads, 0, stream>>>(from, to, n, divisor);
      else cast_kernel<true><<<grid, kThreads, 0, stream>>>(from, to, n, divisor);
    });
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

namespace {

void launch_unscale(const void* grad, DType grad_dtype, float inv_scale, const float* inv_scale_at, float* master,
                    float* found_inf, std::int64_t n, int device, cudaStream_t stream) {
  if (n == 0) return;
  DeviceGuard guard(device);
  const unsigned grid = grid_for(n, kThreads, device);
  with_float_type(grad_dtype, "launch_unscale", [&](auto s) {
    using S = typename decltype(s)::type;
    unscale_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const S*>(grad), inv_scale, inv_scale_at, master,
                                                  found_inf, n);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

void launch_flag_non_finite(const void* x, DType dtype, float* flag, std::int64_t n, int device,
                            cudaStream_t stream) {
  if (n == 0) return;
  DeviceGuard guard(device);
  const unsigned grid = grid_for(n, kThreads, device);
  with_float_type(dtype, "launch_flag_non_finite", [&](auto s) {
    using T = typename decltype(s)::type;
    flag_non_finite_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const T*>(x), flag, n);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace cuda_detail

// ============================================================================================
// kernel implementations
// ============================================================================================

namespace {

void cast_cuda(const Tensor& src, Tensor& dst) {
  CudaDevice& d = cuda_device_of(src);
  cuda_detail::launch_cast(src.raw_data(), src.dtype(), dst.raw_data(), dst.dtype(), src.numel(), 1.f, d.device(),
                           d.stream());
}

void unscale_grads_cuda(const Tensor& grad, float inv_scale, Tensor& master, Tensor& found_inf) {
  CudaDevice& d = cuda_device_of(grad);
  cuda_detail::launch_unscale(grad.raw_data(), grad.dtype(), inv_scale, nullptr, master.data<float>(),
                              found_inf.data<float>(), grad.numel(), d.device(), d.stream());
}

void unscale_grads_by_cuda(const Tensor& grad, const Tensor& inv_scale, Tensor& master, Tensor& found_inf) {
  CudaDevice& d = cuda_device_of(grad);
  cuda_detail::launch_unscale(grad.raw_data(), grad.dtype(), 1.f, inv_scale.data<float>(), master.data<float>(),
                              found_inf.data<float>(), grad.numel(), d.device(), d.stream());
}

void flag_non_finite_cuda(const Tensor& x, Tensor& flag) {
  CudaDevice& d = cuda_device_of(x);
  cuda_detail::launch_flag_non_finite(x.raw_data(), x.dtype(), flag.data<float>(), x.numel(), d.device(), d.stream());
}

}  // namespace

DPL_REGISTER_KERNEL(cast, kCuda, cast_cuda);
DPL_REGISTER_KERNEL(unscale_grads, kCuda, unscale_grads_cuda);
DPL_REGISTER_KERNEL(unscale_grads_by, kCuda, unscale_grads_by_cuda);
DPL_REGISTER_KERNEL(flag_non_finite, kCuda, flag_non_finite_cuda);

}  // namespace dpl::backend
