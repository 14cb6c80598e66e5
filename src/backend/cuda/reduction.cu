// Reductions along one dimension: x viewed as (outer, n, inner), one output per (outer, inner)
// pair, for float32, bfloat16 and float16 (float accumulation, rounded once on store).
//
// With inner == 1 each output's n elements are adjacent, and a warp reduces them (coalesced
// loads, a fixed shuffle tree); otherwise a thread owns an output and walks n, and the threads of
// a warp read adjacent outputs' elements, which are adjacent in memory.
#include <cmath>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/kernels.hpp"

namespace dpl::backend {

namespace cuda_detail {
namespace {

constexpr int kWarpsPerBlock = kThreads / 32;

// ============================================================================================
// kernels
// ============================================================================================

// Whether value v at index i replaces the best b at index j (j == n: none yet): NaN beats every
// number, and on equal values (or two NaNs) the lower index wins, so the result is the first
// extreme whatever order the lanes combine in.
template <ReduceKind kind>
__device__ __forceinline__ bool beats(float v, std::int64_t i, float b, std::int64_t j, std::int64_t n) {
  if (j == n) return i != n;
  if (i == n) return false;
  const bool vn = isnan(v), bn = isnan(b);
  if (vn || bn) return vn && (!bn || i < j);
  if (v == b) return i < j;
  return kind == ReduceKind::kMax ? v > b : v < b;
}

// One warp per output; inner == 1.
template <ReduceKind kind, typename T>
__global__ void reduce_rows_kernel(float alpha, const T* x, T* out, std::int64_t* indices, std::int64_t rows,
                                   std::int64_t n) {
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  const int lane = threadIdx.x & 31;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); r < rows;
       r += warps) {
    const T* xr = x + r * n;
    if constexpr (kind == ReduceKind::kSum) {
      float acc = 0.f;
      for (std::int64_t j = lane; j < n; j += 32) acc += to_float(xr[j]);
      acc = warp_sum(acc);
      if (lane == 0) out[r] = from_float<T>(alpha * acc);
    } else {
      const std::int64_t arg = warp_argmax(
          xr, n, [n](float v, std::int64_t i, float b, std::int64_t j) { return beats<kind>(v, i, b, j, n); });
      if (lane == 0) {
        out[r] = xr[arg];
        indices[r] = arg;
      }
    }
  }
}

// One thread per output; any inner.
template <ReduceKind kind, typename T>
__global__ void reduce_strided_kernel(float alpha, const T* x, T* out, std::int64_t* indices, std::int64_t outer,
                                      std::int64_t n, std::int64_t inner) {
  const std::int64_t total = outer * inner;
  for (std::int64_t k = global_thread(); k < total; k += grid_threads()) {
    const std::int64_t o = k / inner, i = k - o * inner;
    const T* xk = x + o * n * inner + i;
    if constexpr (kind == ReduceKind::kSum) {
      float acc = 0.f;
      for (std::int64_t r = 0; r < n; ++r) acc += to_float(xk[r * inner]);
      out[k] = from_float<T>(alpha * acc);
    } else {
      float best = to_float(xk[0]);
      std::int64_t arg = 0;
      for (std::int64_t r = 1; r < n; ++r) {
        const float v = to_float(xk[r * inner]);
        if (beats<kind>(v, r, best, arg, n)) {
          best = v;
          arg = r;
        }
      }
      out[k] = xk[arg * inner];
      indices[k] = arg;
    }
  }
}

template <bool acc, typename T>
__global__ void reduce_backward_kernel(float alpha, const T* gy, const std::int64_t* indices, T* gx, std::int64_t n,
                                       std::int64_t inner, std::int64_t total) {
  for (std::int64_t e = global_thread(); e < total; e += grid_threads()) {
    const std::int64_t i = e % inner, r = (e / inner) % n, o = e / (inner * n);
    const std::int64_t k = o * inner + i;
    const float v = indices == nullptr ? alpha * to_float(gy[k]) : (indices[k] == r ? to_float(gy[k]) : 0.f);
    gx[e] = from_float<T>(acc ? to_float(gx[e]) + v : v);
  }
}

// ============================================================================================
// launchers
// ============================================================================================

template <ReduceKind kind, typename T>
void launch_reduce_as(float alpha, const T* x, T* out, std::int64_t* indices, std::int64_t outer, std::int64_t n,
                      std::int64_t inner, int device, cudaStream_t stream) {
  if (inner == 1) {
    reduce_rows_kernel<kind><<<grid_for(outer, kWarpsPerBlock, device), kThreads, 0, stream>>>(alpha, x, out, indices,
                                                                                                outer, n);
  } else {
    reduce_strided_kernel<kind><<<grid_for(outer * inner, kThreads, device), kThreads, 0, stream>>>(
        alpha, x, out, indices, outer, n, inner);
  }
}

template <typename T>
void launch_reduce(ReduceKind kind, float alpha, const T* x, T* out, std::int64_t* indices, std::int64_t outer,
                   std::int64_t n, std::int64_t inner, int device, cudaStream_t stream) {
  if (outer * inner == 0) return;
  switch (kind) {
    case ReduceKind::kSum:
      launch_reduce_as<ReduceKind::kSum>(alpha, x, out, indices, outer, n, inner, device, stream);
      break;
    case ReduceKind::kMax:
      launch_reduce_as<ReduceKind::kMax>(alpha, x, out, indices, outer, n, inner, device, stream);
      break;
    case ReduceKind::kMin:
      launch_reduce_as<ReduceKind::kMin>(alpha, x, out, indices, outer, n, inner, device, stream);
      break;
  }
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_reduce_backward(float alpha, const T* gy, const std::int64_t* indices, bool acc, T* gx, std::int64_t n,
                            std::int64_t inner, std::int64_t total, int device, cudaStream_t stream) {
  if (total == 0) return;
  const unsigned grid = grid_for(total, kThreads, device);
  if (acc) reduce_backward_kernel<true><<<grid, kThreads, 0, stream>>>(alpha, gy, indices, gx, n, inner, total);
  else reduce_backward_kernel<false><<<grid, kThreads, 0, stream>>>(alpha, gy, indices, gx, n, inner, total);
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

void reduce_dim_cuda(ReduceKind kind, float alpha, const Tensor& x, Tensor& out, Tensor* indices) {
  on_device_typed(x, "reduce_dim", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    std::int64_t* idx = kind == ReduceKind::kSum ? nullptr : static_cast<std::int64_t*>(indices->raw_data());
    cuda_detail::launch_reduce(kind, alpha, in_ptr<T>(x), out_ptr<T>(out), idx, x.size(0), x.size(1), x.size(2),
                               d.device(), d.stream());
  });
}

void reduce_dim_backward_cuda(ReduceKind kind, float alpha, const Tensor& gy, const Tensor* indices, float beta,
                              Tensor& gx) {
  on_device_typed(gx, "reduce_dim_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const auto* idx = kind == ReduceKind::kSum ? nullptr : static_cast<const std::int64_t*>(indices->raw_data());
    cuda_detail::launch_reduce_backward(alpha, in_ptr<T>(gy), idx, beta != 0.f, out_ptr<T>(gx), gx.size(1),
                                        gx.size(2), gx.numel(), d.device(), d.stream());
  });
}

}  // namespace

DPL_REGISTER_KERNEL(reduce_dim, kCuda, reduce_dim_cuda);
DPL_REGISTER_KERNEL(reduce_dim_backward, kCuda, reduce_dim_backward_cuda);

}  // namespace dpl::backend
