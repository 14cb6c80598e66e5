// Scaled dot-product attention on the GPU for float32, bfloat16 and float16 (computed in float,
// rounded once on store). The registered kernels first offer a call to cuDNN's fused
// flash-attention kernels (backend/cuda/cudnn/attention.cpp, through backend/cuda/attention.hpp)
// where the build has them and DPL_ATTENTION is not plain; what cuDNN does not serve runs here:
// float32, head dimensions cuDNN refuses, strides it cannot take, builds without cuDNN's frontend.
//
// The kernels here are written for every shape first and for speed second. A block of kWarps
// warps serves kWarps * kRows consecutive rows of one (batch, head); each warp owns kRows of them
// and keeps their vectors in registers, lane l holding elements l, l + 32, ... (kSlices of them,
// so head dimensions up to 32 * kSlices). The rows of the other operand stream through shared
// memory in tiles (as float), every warp of the block reading each tile; a dot product is the
// lanes' partial sums added by a shuffle tree. So no (Tq, Tk) matrix is ever stored:
//  - forward: query rows own the block; for each key an online softmax (running maximum and sum,
//    the sums rescaled when the maximum grows) accumulates out; lse = max + log(sum) per row;
//  - backward, two passes that recompute P_ij = exp(scale q_i.k_j - lse_i) and need no atomics:
//    by query rows, delta_i = gout_i.out_i (kept for the second pass) and gq_i = scale sum_j
//    dS_ij k_j with dS_ij = P_ij (gout_i.v_j - delta_i); by key rows, gv_j = sum_i P_ij gout_i
//    and gk_j = scale sum_i dS_ij q_i.
// Causal rows stop at their own position (top-left alignment): a block reads only the keys its
// last row sees, and the key pass only the queries that see its first key.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/attention.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/kernels.hpp"
#include "dpl/core/settings.hpp"

namespace dpl::backend {

namespace cuda_detail {

FusedAttention& fused_attention() {
  static FusedAttention fused;
  return fused;
}

namespace {

constexpr int kWarps = 4;                     // warps per block
constexpr int kTileBytes = 48 * 1024;         // shared memory of one tile (no opt-in needed)
constexpr int kMaxTileRows = 64;              // rows of the streamed operand per tile
constexpr std::int64_t kMaxHeadDim = 32 * 32; // the widest register layout (kSlices 32)

/// Rows a warp owns for a layout of kSlices elements per lane: fewer for wide heads, to bound the
/// registers a thread holds.
template <int kSlices>
constexpr int kRowsFor = kSlices <= 4 ? 4 : kSlices <= 8 ? 2 : 1;

// A (B, H, T, E) operand read through its strides (the last one is 1).
template <typename T>
struct Operand {
  const T* p;
  std::int64_t sb, sh, st;
  __device__ __forceinline__ const T* row(std::int64_t b, std::int64_t h, std::int64_t t) const {
    return p + b * sb + h * sh + t * st;
  }
};

// The extents of a call, its mask and scale, and the rows per shared-memory tile.
struct Geometry {
  std::int64_t B, H, Tq, Tk, D, Dv;
  bool causal;
  float scale;
  int tile;
};

// ============================================================================================
// kernels
// ============================================================================================

__device__ __forceinline__ std::int64_t least(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

/// Rows [t0, t0 + n) of x at (b, h), E elements each, into dst as float (n * E, row-major). Every
/// thread of the block takes part.
template <typename T>
__device__ __forceinline__ void load_tile(const Operand<T>& x, std::int64_t b, std::int64_t h, std::int64_t t0, int n,
                                          std::int64_t e_count, float* dst) {
  // A tile holds at most kTileBytes / 4 elements: 32-bit indices (a 64-bit division per element
  // cost as much as the rest of the loop).
  const int total = n * static_cast<int>(e_count), width = static_cast<int>(e_count);
  const T* first = x.row(b, h, t0);
  for (int e = threadIdx.x; e < total; e += blockDim.x) {
    const int r = e / width;
    dst[e] = to_float(first[r * x.st + (e - r * width)]);
  }
}

/// This lane's elements of a row of E elements (0 beyond E).
template <int kSlices, typename Load>
__device__ __forceinline__ void lane_slices(std::int64_t e_count, float (&out)[kSlices], Load&& load) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int s = 0; s < kSlices; ++s) {
    const std::int64_t d = lane + 32 * s;
    out[s] = d < e_count ? load(d) : 0.f;
  }
}

/// The dot product of two rows held as lane slices, valid in every lane.
template <int kSlices>
__device__ __forceinline__ float warp_dot(const float (&a)[kSlices], const float (&b)[kSlices]) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kSlices; ++i) s += a[i] * b[i];
  return warp_sum(s);
}

/// Stores a row held as lane slices: dst[d] = beta_old * dst[d] + scale * v (acc: beta_old 1).
template <int kSlices, typename T>
__device__ __forceinline__ void store_slices(T* dst, std::int64_t e_count, const float (&v)[kSlices], float scale,
                                             bool acc) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int s = 0; s < kSlices; ++s) {
    const std::int64_t d = lane + 32 * s;
    if (d < e_count) dst[d] = from_float<T>((acc ? to_float(dst[d]) : 0.f) + scale * v[s]);
  }
}

// Which part of the streamed rows a block reads, and the block's own first row.
struct BlockRows {
  std::int64_t b, h, bh, first;  // first: the block's first own row
};

template <int kRows>
__device__ __forceinline__ BlockRows block_rows(std::int64_t heads, std::int64_t own_rows) {
  constexpr int kPerBlock = kWarps * kRows;
  const std::int64_t blocks_per_head = (own_rows + kPerBlock - 1) / kPerBlock;
  const std::int64_t bh = blockIdx.x / blocks_per_head;
  return {bh / heads, bh % heads, bh, (blockIdx.x % blocks_per_head) * kPerBlock};
}

template <int kSlices, int kRows, typename T>
__global__ void __launch_bounds__(kWarps * 32)
    sdpa_forward_kernel(Geometry g, Operand<T> q, Operand<T> k, Operand<T> v, T* out, float* lse) {
  extern __shared__ float smem[];
  float* ks = smem;
  float* vs = smem + static_cast<std::int64_t>(g.tile) * g.D;
  const BlockRows br = block_rows<kRows>(g.H, g.Tq);
  const std::int64_t row0 = br.first + (threadIdx.x >> 5) * kRows;
  float qr[kRows][kSlices], acc[kRows][kSlices], m[kRows], l[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const std::int64_t i = row0 + r;
    const T* qi = i < g.Tq ? q.row(br.b, br.h, i) : nullptr;
    lane_slices(g.D, qr[r], [&](std::int64_t d) { return qi != nullptr ? to_float(qi[d]) : 0.f; });
#pragma unroll
    for (int s = 0; s < kSlices; ++s) acc[r][s] = 0.f;
    m[r] = -INFINITY;
    l[r] = 0.f;
  }
  const std::int64_t last = least(g.Tq, br.first + kWarps * kRows) - 1;
  const std::int64_t kend = g.causal ? least(g.Tk, last + 1) : g.Tk;
  for (std::int64_t j0 = 0; j0 < kend; j0 += g.tile) {
    const int n = static_cast<int>(least(g.tile, kend - j0));
    __syncthreads();  // every warp is done with the previous tile
    load_tile(k, br.b, br.h, j0, n, g.D, ks);
    load_tile(v, br.b, br.h, j0, n, g.Dv, vs);
    __syncthreads();
    for (int jj = 0; jj < n; ++jj) {
      const std::int64_t j = j0 + jj;
      float kv[kSlices], vv[kSlices], sc[kRows];
      lane_slices(g.D, kv, [&](std::int64_t d) { return ks[jj * g.D + d]; });
#pragma unroll
      for (int r = 0; r < kRows; ++r) sc[r] = warp_dot(qr[r], kv);
      lane_slices(g.Dv, vv, [&](std::int64_t d) { return vs[jj * g.Dv + d]; });
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const std::int64_t i = row0 + r;
        if (i >= g.Tq || (g.causal && j > i)) continue;
        // The sums are rescaled only when the maximum grows, which after the first keys is rare:
        // one exponential per key instead of two. (A NaN score makes p, and so the row, NaN.)
        const float s = g.scale * sc[r];
        float p = 1.f;
        if (s > m[r]) {
          const float alpha = expf(m[r] - s);  // 0 for the row's first key (m = -inf)
          l[r] *= alpha;
#pragma unroll
          for (int e = 0; e < kSlices; ++e) acc[r][e] *= alpha;
          m[r] = s;
        } else {
          p = expf(s - m[r]);
        }
        l[r] += p;
#pragma unroll
        for (int e = 0; e < kSlices; ++e) acc[r][e] += p * vv[e];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const std::int64_t i = row0 + r;
    if (i >= g.Tq) continue;
    store_slices(out + (br.bh * g.Tq + i) * g.Dv, g.Dv, acc[r], 1.f / l[r], false);
    if ((threadIdx.x & 31) == 0) lse[br.bh * g.Tq + i] = m[r] + logf(l[r]);
  }
}

// Backward by query rows: delta_i = gout_i.out_i (into delta) and gq_i.
template <int kSlices, int kRows, typename T>
__global__ void __launch_bounds__(kWarps * 32)
    sdpa_backward_q_kernel(Geometry g, Operand<T> q, Operand<T> k, Operand<T> v, const T* out, const T* gout,
                           const float* lse, float* delta, bool acc, T* gq) {
  extern __shared__ float smem[];
  float* ks = smem;
  float* vs = smem + static_cast<std::int64_t>(g.tile) * g.D;
  const BlockRows br = block_rows<kRows>(g.H, g.Tq);
  const std::int64_t row0 = br.first + (threadIdx.x >> 5) * kRows;
  float qr[kRows][kSlices], gr[kRows][kSlices], dq[kRows][kSlices], li[kRows], di[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const std::int64_t i = row0 + r;
    const bool in = i < g.Tq;
    const T* qi = in ? q.row(br.b, br.h, i) : nullptr;
    const T* gi = in ? gout + (br.bh * g.Tq + i) * g.Dv : nullptr;
    const T* oi = in ? out + (br.bh * g.Tq + i) * g.Dv : nullptr;
    lane_slices(g.D, qr[r], [&](std::int64_t d) { return in ? to_float(qi[d]) : 0.f; });
    lane_slices(g.Dv, gr[r], [&](std::int64_t d) { return in ? to_float(gi[d]) : 0.f; });
    float o[kSlices];
    lane_slices(g.Dv, o, [&](std::int64_t d) { return in ? to_float(oi[d]) : 0.f; });
    di[r] = warp_dot(gr[r], o);
    li[r] = in ? lse[br.bh * g.Tq + i] : 0.f;
#pragma unroll
    for (int s = 0; s < kSlices; ++s) dq[r][s] = 0.f;
  }
  const std::int64_t last = least(g.Tq, br.first + kWarps * kRows) - 1;
  const std::int64_t kend = g.causal ? least(g.Tk, last + 1) : g.Tk;
  for (std::int64_t j0 = 0; j0 < kend; j0 += g.tile) {
    const int n = static_cast<int>(least(g.tile, kend - j0));
    __syncthreads();
    load_tile(k, br.b, br.h, j0, n, g.D, ks);
    load_tile(v, br.b, br.h, j0, n, g.Dv, vs);
    __syncthreads();
    for (int jj = 0; jj < n; ++jj) {
      const std::int64_t j = j0 + jj;
      float kv[kSlices], vv[kSlices], sc[kRows], dp[kRows];
      lane_slices(g.D, kv, [&](std::int64_t d) { return ks[jj * g.D + d]; });
      lane_slices(g.Dv, vv, [&](std::int64_t d) { return vs[jj * g.Dv + d]; });
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        sc[r] = warp_dot(qr[r], kv);
        dp[r] = warp_dot(gr[r], vv);
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const std::int64_t i = row0 + r;
        if (i >= g.Tq || (g.causal && j > i)) continue;
        const float p = expf(g.scale * sc[r] - li[r]);
        const float ds = p * (dp[r] - di[r]);
#pragma unroll
        for (int e = 0; e < kSlices; ++e) dq[r][e] += ds * kv[e];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const std::int64_t i = row0 + r;
    if (i >= g.Tq) continue;
    store_slices(gq + (br.bh * g.Tq + i) * g.D, g.D, dq[r], g.scale, acc);
    if ((threadIdx.x & 31) == 0) delta[br.bh * g.Tq + i] = di[r];
  }
}

// Backward by key rows: gk_j and gv_j, from the query rows that see key j.
template <int kSlices, int kRows, typename T>
__global__ void __launch_bounds__(kWarps * 32)
    sdpa_backward_kv_kernel(Geometry g, Operand<T> q, Operand<T> k, Operand<T> v, const T* gout, const float* lse,
                            const float* delta, bool acc, T* gk, T* gv) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* gs = qs + static_cast<std::int64_t>(g.tile) * g.D;
  float* ls = gs + static_cast<std::int64_t>(g.tile) * g.Dv;
  float* ds = ls + g.tile;
  const BlockRows br = block_rows<kRows>(g.H, g.Tk);
  const std::int64_t row0 = br.first + (threadIdx.x >> 5) * kRows;
  float kr[kRows][kSlices], vr[kRows][kSlices], dk[kRows][kSlices], dv[kRows][kSlices];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const std::int64_t j = row0 + r;
    const bool in = j < g.Tk;
    const T* kj = in ? k.row(br.b, br.h, j) : nullptr;
    const T* vj = in ? v.row(br.b, br.h, j) : nullptr;
    lane_slices(g.D, kr[r], [&](std::int64_t d) { return in ? to_float(kj[d]) : 0.f; });
    lane_slices(g.Dv, vr[r], [&](std::int64_t d) { return in ? to_float(vj[d]) : 0.f; });
#pragma unroll
    for (int s = 0; s < kSlices; ++s) dk[r][s] = dv[r][s] = 0.f;
  }
  // Causal: query i sees key j when j <= i, so the block's first key bounds the queries below.
  const std::int64_t i_begin = g.causal ? least(br.first, g.Tq) : 0;
  const Operand<T> go{gout, g.H * g.Tq * g.Dv, g.Tq * g.Dv, g.Dv};
  for (std::int64_t i0 = i_begin; i0 < g.Tq; i0 += g.tile) {
    const int n = static_cast<int>(least(g.tile, g.Tq - i0));
    __syncthreads();
    load_tile(q, br.b, br.h, i0, n, g.D, qs);
    load_tile(go, br.b, br.h, i0, n, g.Dv, gs);
    for (int t = threadIdx.x; t < n; t += blockDim.x) {
      ls[t] = lse[br.bh * g.Tq + i0 + t];
      ds[t] = delta[br.bh * g.Tq + i0 + t];
    }
    __syncthreads();
    for (int ii = 0; ii < n; ++ii) {
      const std::int64_t i = i0 + ii;
      float qv[kSlices], gv_[kSlices], sc[kRows], dp[kRows];
      lane_slices(g.D, qv, [&](std::int64_t d) { return qs[ii * g.D + d]; });
      lane_slices(g.Dv, gv_, [&](std::int64_t d) { return gs[ii * g.Dv + d]; });
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        sc[r] = warp_dot(kr[r], qv);
        dp[r] = warp_dot(vr[r], gv_);
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const std::int64_t j = row0 + r;
        if (j >= g.Tk || (g.causal && j > i)) continue;
        const float p = expf(g.scale * sc[r] - ls[ii]);
        const float dsv = p * (dp[r] - ds[ii]);
#pragma unroll
        for (int e = 0; e < kSlices; ++e) {
          dv[r][e] += p * gv_[e];
          dk[r][e] += dsv * qv[e];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const std::int64_t j = row0 + r;
    if (j >= g.Tk) continue;
    store_slices(gk + (br.bh * g.Tk + j) * g.D, g.D, dk[r], g.scale, acc);
    store_slices(gv + (br.bh * g.Tk + j) * g.Dv, g.Dv, dv[r], 1.f, acc);
  }
}

// ============================================================================================
// launchers
// ============================================================================================

template <typename T>
Operand<T> operand_of(const Tensor& t) {
  return {in_ptr<T>(t), t.strides()[0], t.strides()[1], t.strides()[2]};
}

Geometry geometry_of(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v) {
  return {q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3), p.causal, p.scale, 0};
}

/// Rows of `floats_per_row` floats that fit one tile, at most kMaxTileRows.
int tile_rows(std::int64_t floats_per_row) {
  const std::int64_t rows = kTileBytes / (floats_per_row * static_cast<std::int64_t>(sizeof(float)));
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(kMaxTileRows, rows)));
}

/// Calls launch(std::integral_constant<int, kSlices>) with the narrowest register layout that
/// holds head dimensions D and Dv.
template <typename Launch>
void with_slices(const Geometry& g, Launch&& launch) {
  const std::int64_t widest = std::max(g.D, g.Dv);
  DPL_CHECK(widest <= kMaxHeadDim, "scaled_dot_product_attention: dpl's GPU kernels take head dimensions up to ",
            kMaxHeadDim, ", got D = ", g.D, " and Dv = ", g.Dv);
  if (widest <= 64) launch(std::integral_constant<int, 2>{});
  else if (widest <= 128) launch(std::integral_constant<int, 4>{});
  else if (widest <= 256) launch(std::integral_constant<int, 8>{});
  else launch(std::integral_constant<int, 32>{});
}

/// Blocks for `rows` own rows per (batch, head) at kRows rows per warp.
unsigned blocks_for(const Geometry& g, std::int64_t rows, int rows_per_warp) {
  const std::int64_t per_block = static_cast<std::int64_t>(kWarps) * rows_per_warp;
  const std::int64_t blocks = g.B * g.H * ((rows + per_block - 1) / per_block);
  DPL_CHECK(blocks <= 0x7fffffff, "scaled_dot_product_attention: ", blocks,
            " blocks exceed the GPU's grid; split the batch");
  return static_cast<unsigned>(blocks);
}

template <typename T>
void launch_sdpa_forward(Geometry g, const Operand<T>& q, const Operand<T>& k, const Operand<T>& v, T* out,
                         float* lse, cudaStream_t stream) {
  if (g.B * g.H * g.Tq == 0) return;
  g.tile = tile_rows(g.D + g.Dv);
  const std::size_t shared = static_cast<std::size_t>(g.tile) * static_cast<std::size_t>(g.D + g.Dv) * sizeof(float);
  with_slices(g, [&](auto slices) {
    constexpr int kS = decltype(slices)::value;
    constexpr int kR = kRowsFor<kS>;
    sdpa_forward_kernel<kS, kR><<<blocks_for(g, g.Tq, kR), kWarps * 32, shared, stream>>>(g, q, k, v, out, lse);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_sdpa_backward(Geometry g, const Operand<T>& q, const Operand<T>& k, const Operand<T>& v, const T* out,
                          const T* gout, const float* lse, float* delta, bool acc, T* gq, T* gk, T* gv,
                          cudaStream_t stream) {
  if (g.B * g.H == 0) return;
  with_slices(g, [&](auto slices) {
    constexpr int kS = decltype(slices)::value;
    constexpr int kR = kRowsFor<kS>;
    if (g.Tq > 0) {
      Geometry gq_geometry = g;
      gq_geometry.tile = tile_rows(g.D + g.Dv);
      const std::size_t shared =
          static_cast<std::size_t>(gq_geometry.tile) * static_cast<std::size_t>(g.D + g.Dv) * sizeof(float);
      sdpa_backward_q_kernel<kS, kR><<<blocks_for(g, g.Tq, kR), kWarps * 32, shared, stream>>>(
          gq_geometry, q, k, v, out, gout, lse, delta, acc, gq);
      DPL_CUDA_CHECK(cudaGetLastError());
    }
    if (g.Tk > 0) {
      Geometry gkv_geometry = g;
      gkv_geometry.tile = tile_rows(g.D + g.Dv + 2);
      const std::size_t shared =
          static_cast<std::size_t>(gkv_geometry.tile) * static_cast<std::size_t>(g.D + g.Dv + 2) * sizeof(float);
      sdpa_backward_kv_kernel<kS, kR><<<blocks_for(g, g.Tk, kR), kWarps * 32, shared, stream>>>(
          gkv_geometry, q, k, v, gout, lse, delta, acc, gk, gv);
      DPL_CUDA_CHECK(cudaGetLastError());
    }
  });
}

}  // namespace
}  // namespace cuda_detail

// ============================================================================================
// kernel implementations
// ============================================================================================

namespace {

using cuda_detail::fused_attention;
using cuda_detail::in_ptr;
using cuda_detail::on_device_typed;
using cuda_detail::out_ptr;

// Whether a call may go to cuDNN's fused kernels: asked for, not refused by DPL_ATTENTION (read
// once), and built.
bool fused_allowed(const SdpaParams& p) {
  static const bool plain = settings().attention == AttentionSetting::kPlain;
  return p.allow_fused && !plain && fused_attention().forward != nullptr;
}

void check_lse(const char* kernel, const Tensor& lse) {
  DPL_CHECK(lse.dtype() == kFloat32, kernel, ": expected float32 statistics, got ", lse.dtype());
}

// The plain kernels read and write out, gout and the gradients packed: a strided one goes through
// a packed copy (of its contents: accumulation reads them), laid back into it by finish_packed.
Tensor packed(const Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }
void finish_packed(const Tensor& work, Tensor& t) {
  if (!work.shares_storage_with(t)) t.copy_(work);
}

void sdpa_forward_cuda(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                       Tensor& lse) {
  check_lse("sdpa_forward", lse);
  if (fused_allowed(p) && fused_attention().forward(p, q, k, v, out, lse)) return;
  Tensor o = out.is_contiguous() ? out : Tensor::empty(out.shape(), TensorOptions(out.dtype(), out.device()));
  on_device_typed(q, "sdpa_forward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_sdpa_forward(cuda_detail::geometry_of(p, q, k, v), cuda_detail::operand_of<T>(q),
                                     cuda_detail::operand_of<T>(k), cuda_detail::operand_of<T>(v), out_ptr<T>(o),
                                     out_ptr<float>(lse), d.stream());
  });
  finish_packed(o, out);
}

void sdpa_backward_cuda(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& gout, const Tensor& lse, float beta, Tensor& gq, Tensor& gk, Tensor& gv) {
  check_lse("sdpa_backward", lse);
  if (fused_allowed(p) && fused_attention().backward(p, q, k, v, out, gout, lse, beta, gq, gk, gv)) return;
  // delta_i = gout_i . out_i, from the query pass to the key pass.
  Tensor delta = Tensor::empty({q.size(0), q.size(1), q.size(2)}, TensorOptions(kFloat32, q.device()));
  const Tensor o = packed(out), go = packed(gout);
  Tensor wq = packed(gq), wk = packed(gk), wv = packed(gv);
  on_device_typed(q, "sdpa_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_sdpa_backward(cuda_detail::geometry_of(p, q, k, v), cuda_detail::operand_of<T>(q),
                                      cuda_detail::operand_of<T>(k), cuda_detail::operand_of<T>(v), in_ptr<T>(o),
                                      in_ptr<T>(go), in_ptr<float>(lse), out_ptr<float>(delta), beta != 0.f,
                                      out_ptr<T>(wq), out_ptr<T>(wk), out_ptr<T>(wv), d.stream());
  });
  finish_packed(wq, gq);
  finish_packed(wk, gk);
  finish_packed(wv, gv);
}

bool sdpa_fused_cuda(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v) {
  return fused_allowed(p) && fused_attention().supports != nullptr && fused_attention().supports(p, q, k, v);
}

}  // namespace

DPL_REGISTER_KERNEL(sdpa_forward, kCuda, sdpa_forward_cuda);
DPL_REGISTER_KERNEL(sdpa_backward, kCuda, sdpa_backward_cuda);
DPL_REGISTER_KERNEL(sdpa_fused, kCuda, sdpa_fused_cuda);

}  // namespace dpl::backend
