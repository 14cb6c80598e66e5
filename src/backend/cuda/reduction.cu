// Reductions along one dimension: x viewed as (outer, n, inner), one output per (outer, inner)
// pair, for float32, bfloat16 and float16 (float accumulation, rounded once on store).
//
// With inner == 1 each output's n elements are adjacent, and a warp reduces them (coalesced
// loads, a fixed shuffle tree); otherwise a block takes 32 adjacent outputs, whose elements are
// adjacent in memory in every reduced row, and splits n among its rows of threads.
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

// One warp per output; inner == 1. Max and min read V elements per lane at a time (16 bytes where
// the launcher allows): their winner does not depend on the order of the comparisons.
template <ReduceKind kind, int V, typename T>
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
      const std::int64_t arg = warp_argmax<V>(
          xr, n, [n](float v, std::int64_t i, float b, std::int64_t j) { return beats<kind>(v, i, b, j, n); });
      if (lane == 0) {
        out[r] = xr[arg];
        indices[r] = arg;
      }
    }
  }
}

// inner > 1: a block owns 32 adjacent outputs of one outer index (one coalesced 32-wide read per
// reduced row); its 32 x kColumnsY threads walk down n and combine their partials in a fixed
// order, so the result does not depend on timing.
constexpr int kColumnsY = 16;

template <ReduceKind kind, typename T>
__global__ void reduce_columns_kernel(float alpha, const T* x, T* out, std::int64_t* indices, std::int64_t outer,
                                      std::int64_t n, std::int64_t inner) {
  __shared__ float part[kColumnsY][33];
  __shared__ std::int64_t part_arg[kColumnsY][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * 32 + tx;
  for (std::int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    const T* xo = x + o * n * inner;
    float acc = 0.f;
    std::int64_t arg = n;  // max and min: the best so far is (acc, arg); n means none yet
    if (i < inner) {
      for (std::int64_t r = ty; r < n; r += kColumnsY) {
        const float v = to_float(xo[r * inner + i]);
        if constexpr (kind == ReduceKind::kSum) {
          acc += v;
        } else if (beats<kind>(v, r, acc, arg, n)) {
          acc = v;
          arg = r;
        }
      }
    }
    part[ty][tx] = acc;
    part_arg[ty][tx] = arg;
    __syncthreads();
    if (ty == 0 && i < inner) {
      float total = part[0][tx];
      std::int64_t best = part_arg[0][tx];
      for (int y = 1; y < kColumnsY; ++y) {
        if constexpr (kind == ReduceKind::kSum) {
          total += part[y][tx];
        } else if (beats<kind>(part[y][tx], part_arg[y][tx], total, best, n)) {
          total = part[y][tx];
          best = part_arg[y][tx];
        }
      }
      const std::int64_t k = o * inner + i;
      if constexpr (kind == ReduceKind::kSum) {
        out[k] = from_float<T>(alpha * total);
      } else {
        out[k] = xo[best * inner + i];
        indices[k] = best;
      }
    }
    __syncthreads();  // part is reused for the next outer index
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
    const unsigned grid = grid_for(outer, kWarpsPerBlock, device);
    constexpr int kV = kPack<T>;
    if (kind != ReduceKind::kSum && n % kV == 0 && aligned16(x))
      reduce_rows_kernel<kind, kV><<<grid, kThreads, 0, stream>>>(alpha, x, out, indices, outer, n);
    else
      reduce_rows_kernel<kind, 1><<<grid, kThreads, 0, stream>>>(alpha, x, out, indices, outer, n);
  } else {
    const dim3 block(32, kColumnsY);
    const dim3 grid(static_cast<unsigned>((inner + 31) / 32), static_cast<unsigned>(outer < 65535 ? outer : 65535));
    reduce_columns_kernel<kind><<<grid, block, 0, stream>>>(alpha, x, out, indices, outer, n, inner);
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
