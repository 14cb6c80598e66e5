// Adaptive average pooling and upsampling for float32, bfloat16 and float16 (computed in float,
// rounded once on store). Forward: one thread per output pixel reads its window or taps. Backward
// gathers instead of scattering: one thread per input pixel sums the gradients of the outputs
// that read it, so the result needs no atomics and does not depend on timing.
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/kernels.hpp"
#include "backend/resampling_math.hpp"

namespace dpl::backend {

namespace cuda_detail {
namespace {

// ============================================================================================
// kernels
// ============================================================================================

// PyTorch's adaptive window of output index i when `in` elements pool into `out`:
// [floor(i in / out), ceil((i + 1) in / out)). With in and out swapped it gives the outputs whose
// windows hold input index i.
__device__ __forceinline__ std::int64_t window_start(std::int64_t i, std::int64_t in, std::int64_t out) {
  return i * in / out;
}
__device__ __forceinline__ std::int64_t window_end(std::int64_t i, std::int64_t in, std::int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

template <typename T>
__global__ void adaptive_avg_pool2d_kernel(const T* x, T* y, std::int64_t planes, std::int64_t h, std::int64_t w,
                                           std::int64_t ho, std::int64_t wo) {
  const std::int64_t n = planes * ho * wo;
  for (std::int64_t k = global_thread(); k < n; k += grid_threads()) {
    const std::int64_t j = k % wo, i = (k / wo) % ho, p = k / (wo * ho);
    const std::int64_t r0 = window_start(i, h, ho), r1 = window_end(i, h, ho);
    const std::int64_t c0 = window_start(j, w, wo), c1 = window_end(j, w, wo);
    const T* xp = x + p * h * w;
    float s = 0.f;
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t c = c0; c < c1; ++c) s += to_float(xp[r * w + c]);
    y[k] = from_float<T>(s / static_cast<float>((r1 - r0) * (c1 - c0)));
  }
}

template <bool acc, typename T>
__global__ void adaptive_avg_pool2d_backward_kernel(const T* gy, T* gx, std::int64_t planes, std::int64_t h,
                                                    std::int64_t w, std::int64_t ho, std::int64_t wo) {
  const std::int64_t n = planes * h * w;
  for (std::int64_t k = global_thread(); k < n; k += grid_threads()) {
    const std::int64_t c = k % w, r = (k / w) % h, p = k / (w * h);
    const T* gp = gy + p * ho * wo;
    float s = 0.f;
    for (std::int64_t i = window_start(r, ho, h); i < window_end(r, ho, h); ++i) {
      const std::int64_t rows = window_end(i, h, ho) - window_start(i, h, ho);
      for (std::int64_t j = window_start(c, wo, w); j < window_end(c, wo, w); ++j) {
        const std::int64_t cols = window_end(j, w, wo) - window_start(j, w, wo);
        s += to_float(gp[i * wo + j]) / static_cast<float>(rows * cols);
      }
    }
    gx[k] = from_float<T>(acc ? to_float(gx[k]) + s : s);
  }
}

template <typename T>
__global__ void upsample2d_kernel(Upsample2dParams p, const T* x, T* y, std::int64_t planes, std::int64_t h,
                                  std::int64_t w, std::int64_t ho, std::int64_t wo) {
  const std::int64_t n = planes * ho * wo;
  for (std::int64_t k = global_thread(); k < n; k += grid_threads()) {
    const std::int64_t j = k % wo, i = (k / wo) % ho, plane = k / (wo * ho);
    const UpsampleTaps r = upsample_taps(p.mode, p.align_corners, p.scale_h, i, h, ho);
    const UpsampleTaps c = upsample_taps(p.mode, p.align_corners, p.scale_w, j, w, wo);
    const T* x0 = x + plane * h * w + r.i0 * w;
    const T* x1 = x + plane * h * w + r.i1 * w;
    if (p.mode == UpsampleMode::kNearest) {
      y[k] = x0[c.i0];
    } else {
      const float v = r.w0 * (c.w0 * to_float(x0[c.i0]) + c.w1 * to_float(x0[c.i1])) +
                      r.w1 * (c.w0 * to_float(x1[c.i0]) + c.w1 * to_float(x1[c.i1]));
      y[k] = from_float<T>(v);
    }
  }
}

// The same sums in the same order as the CPU's upsample2d_backward_cpu.
template <bool acc, typename T>
__global__ void upsample2d_backward_kernel(Upsample2dParams p, const T* gy, T* gx, std::int64_t planes, std::int64_t h,
                                           std::int64_t w, std::int64_t ho, std::int64_t wo) {
  const std::int64_t n = planes * h * w;
  for (std::int64_t k = global_thread(); k < n; k += grid_threads()) {
    const std::int64_t c = k % w, r = (k / w) % h, plane = k / (w * h);
    const std::int64_t i0 = upsample_first_reader(p.mode, p.align_corners, p.scale_h, r - 1, h, ho);
    const std::int64_t i1 = upsample_first_reader(p.mode, p.align_corners, p.scale_h, r + 1, h, ho);
    const std::int64_t j0 = upsample_first_reader(p.mode, p.align_corners, p.scale_w, c - 1, w, wo);
    const std::int64_t j1 = upsample_first_reader(p.mode, p.align_corners, p.scale_w, c + 1, w, wo);
    const T* gp = gy + plane * ho * wo;
    float s = 0.f;
    for (std::int64_t i = i0; i < i1; ++i) {
      const float wr = upsample_weight(upsample_taps(p.mode, p.align_corners, p.scale_h, i, h, ho), r);
      if (wr == 0.f) continue;
      float t = 0.f;
      for (std::int64_t j = j0; j < j1; ++j)
        t += upsample_weight(upsample_taps(p.mode, p.align_corners, p.scale_w, j, w, wo), c) * to_float(gp[i * wo + j]);
      s += wr * t;
    }
    gx[k] = from_float<T>(acc ? to_float(gx[k]) + s : s);
  }
}

// ============================================================================================
// launchers
// ============================================================================================

template <typename T>
void launch_upsample2d(const Upsample2dParams& p, const T* x, T* y, std::int64_t planes, std::int64_t h,
                       std::int64_t w, std::int64_t ho, std::int64_t wo, int device, cudaStream_t stream) {
  const std::int64_t n = planes * ho * wo;
  if (n == 0) return;
  upsample2d_kernel<<<grid_for(n, kThreads, device), kThreads, 0, stream>>>(p, x, y, planes, h, w, ho, wo);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_upsample2d_backward(const Upsample2dParams& p, const T* gy, bool acc, T* gx, std::int64_t planes,
                                std::int64_t h, std::int64_t w, std::int64_t ho, std::int64_t wo, int device,
                                cudaStream_t stream) {
  const std::int64_t n = planes * h * w;
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads, device);
  if (acc) upsample2d_backward_kernel<true><<<grid, kThreads, 0, stream>>>(p, gy, gx, planes, h, w, ho, wo);
  else upsample2d_backward_kernel<false><<<grid, kThreads, 0, stream>>>(p, gy, gx, planes, h, w, ho, wo);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_adaptive_avg_pool2d(const T* x, T* y, std::int64_t planes, std::int64_t h, std::int64_t w,
                                std::int64_t ho, std::int64_t wo, int device, cudaStream_t stream) {
  const std::int64_t n = planes * ho * wo;
  if (n == 0) return;
  adaptive_avg_pool2d_kernel<<<grid_for(n, kThreads, device), kThreads, 0, stream>>>(x, y, planes, h, w, ho, wo);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_adaptive_avg_pool2d_backward(const T* gy, bool acc, T* gx, std::int64_t planes, std::int64_t h,
                                         std::int64_t w, std::int64_t ho, std::int64_t wo, int device,
                                         cudaStream_t stream) {
  const std::int64_t n = planes * h * w;
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads, device);
  if (acc) adaptive_avg_pool2d_backward_kernel<true><<<grid, kThreads, 0, stream>>>(gy, gx, planes, h, w, ho, wo);
  else adaptive_avg_pool2d_backward_kernel<false><<<grid, kThreads, 0, stream>>>(gy, gx, planes, h, w, ho, wo);
  DPL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace cuda_detail

// ============================================================================================
// kernel implementations
// ============================================================================================

namespace {

using cuda_detail::in_ptr;
using cuda_detail::on_device_typed;
using cuda_detail::out_ptr;

void adaptive_avg_pool2d_cuda(const Tensor& x, Tensor& y) {
  on_device_typed(x, "adaptive_avg_pool2d", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_adaptive_avg_pool2d(in_ptr<T>(x), out_ptr<T>(y), x.size(0) * x.size(1), x.size(2), x.size(3),
                                            y.size(2), y.size(3), d.device(), d.stream());
  });
}

void adaptive_avg_pool2d_backward_cuda(const Tensor& gy, float beta, Tensor& gx) {
  on_device_typed(gy, "adaptive_avg_pool2d_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_adaptive_avg_pool2d_backward(in_ptr<T>(gy), beta != 0.f, out_ptr<T>(gx),
                                                     gx.size(0) * gx.size(1), gx.size(2), gx.size(3), gy.size(2),
                                                     gy.size(3), d.device(), d.stream());
  });
}

void upsample2d_cuda(const Upsample2dParams& p, const Tensor& x, Tensor& y) {
  on_device_typed(x, "upsample2d", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_upsample2d(p, in_ptr<T>(x), out_ptr<T>(y), x.size(0) * x.size(1), x.size(2), x.size(3),
                                   y.size(2), y.size(3), d.device(), d.stream());
  });
}

void upsample2d_backward_cuda(const Upsample2dParams& p, const Tensor& gy, float beta, Tensor& gx) {
  on_device_typed(gy, "upsample2d_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_upsample2d_backward(p, in_ptr<T>(gy), beta != 0.f, out_ptr<T>(gx), gx.size(0) * gx.size(1),
                                            gx.size(2), gx.size(3), gy.size(2), gy.size(3), d.device(), d.stream());
  });
}

}  // namespace

DPL_REGISTER_KERNEL(adaptive_avg_pool2d, kCuda, adaptive_avg_pool2d_cuda);
DPL_REGISTER_KERNEL(adaptive_avg_pool2d_backward, kCuda, adaptive_avg_pool2d_backward_cuda);
DPL_REGISTER_KERNEL(upsample2d, kCuda, upsample2d_cuda);
DPL_REGISTER_KERNEL(upsample2d_backward, kCuda, upsample2d_backward_cuda);

}  // namespace dpl::backend
