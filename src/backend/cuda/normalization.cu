// Group and layer normalisation for float32, bfloat16 and float16 (computed in float, rounded
// once on store).
//
// Rows (a sample's group, or a layer-norm row) are contiguous: one block per row sums it (mean,
// then squared deviations: two passes keep the variance's precision when the mean is large; the
// row is re-read from L2) and writes it. Rows of channels with inner 1 (layer norm) that fit in a
// warp's registers go to one warp each instead, forward and input gradient. Backward gives each row to a block for the input's
// gradient; the affine parameters' gradients are column sums over the rows, by a block of 32
// channels (layer norm, coalesced across the row) or one block per channel (group norm, whose
// channels are runs of `inner` elements).
#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/kernels.hpp"

namespace dpl::backend {

namespace cuda_detail {
namespace {

constexpr int kColumnTile = 32;      // channels per block of the column-sum kernel
constexpr int kColumnRowSlices = 8;  // rows summed in parallel per channel in that kernel

// ============================================================================================
// kernels
// ============================================================================================

/// Sums a and b over the block; the totals are valid in every thread. Every thread must call it.
/// The fixed shuffle tree makes them independent of timing.
__device__ __forceinline__ float2 block_sum2(float a, float b) {
  __shared__ float2 warp_part[32];
  __shared__ float2 total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // warp_part and total may still be read by an earlier call
  a = warp_sum(a);
  b = warp_sum(b);
  if (lane == 0) warp_part[warp] = make_float2(a, b);
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    float2 v = lane < warps ? warp_part[lane] : make_float2(0.f, 0.f);
    v.x = warp_sum(v.x);
    v.y = warp_sum(v.y);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

template <typename T>
__global__ void normalize_groups_kernel(NormGroups g, const T* x, const float* w, const float* b, float eps, T* y,
                                        float* mean, float* rstd) {
  const std::int64_t cg = g.channels / g.groups, len = cg * g.inner, rows = g.n * g.groups;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * len;
    float s = 0.f;
    for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) s += to_float(xr[j]);
    const float m = block_sum2(s, 0.f).x / static_cast<float>(len);
    float sq = 0.f;
    for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const float d = to_float(xr[j]) - m;
      sq += d * d;
    }
    const float inv = rsqrtf(block_sum2(sq, 0.f).x / static_cast<float>(len) + eps);
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = inv;
    }
    const std::int64_t c0 = (r % g.groups) * cg;
    T* yr = y + r * len;
    for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const std::int64_t c = c0 + j / g.inner;
      yr[j] = from_float<T>((to_float(xr[j]) - m) * inv * w[c] + b[c]);
    }
  }
}

// gx = rstd * (gy*w - mean(gy*w) - xhat * mean(gy*w*xhat)) per row.
template <bool acc, typename T>
__global__ void groups_input_grad_kernel(NormGroups g, const T* x, const T* gy, const float* w, const float* mean,
                                         const float* rstd, T* gx) {
  const std::int64_t cg = g.channels / g.groups, len = cg * g.inner, rows = g.n * g.groups;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t off = r * len, c0 = (r % g.groups) * cg;
    const float m = mean[r], s = rstd[r];
    float a = 0.f, b = 0.f;
    for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const float gw = to_float(gy[off + j]) * w[c0 + j / g.inner];
      a += gw;
      b += gw * (to_float(x[off + j]) - m) * s;
    }
    const float2 t = block_sum2(a, b);
    const float ma = t.x / static_cast<float>(len), mb = t.y / static_cast<float>(len);
    for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const float xhat = (to_float(x[off + j]) - m) * s;
      const float v = s * (to_float(gy[off + j]) * w[c0 + j / g.inner] - ma - xhat * mb);
      gx[off + j] = from_float<T>(acc ? to_float(gx[off + j]) + v : v);
    }
  }
}

// --- rows with inner == 1 (layer norm), a warp per row ---------------------------------------
// A row of up to 32 * V * kMaxPacks elements (768 in GPT-2) fits in the registers of one warp: each
// lane holds its P packs of V elements (16 bytes each; P the least of 1, 2, 4, 8 that holds the
// row, so that short rows do not pay in registers and occupancy for long ones), so the row is read from memory once, the
// sums are warp shuffles instead of block-wide barriers, and a block serves kRowsPerBlock rows.
// The statistics are the same two-pass ones as the block kernels'.
constexpr int kMaxPacks = 8;
constexpr int kRowsPerBlock = kThreads / 32;

__device__ __forceinline__ std::int64_t first_warp_row() {
  return static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
}
__device__ __forceinline__ std::int64_t warp_row_stride() {
  return static_cast<std::int64_t>(gridDim.x) * kRowsPerBlock;
}

/// Loads this lane's packs of row xr (len elements, len / V packs) into v; the packs past the row
/// are left unset.
template <int V, int P, typename T>
__device__ __forceinline__ void load_row_packs(const T* xr, std::int64_t packs, float (&v)[P][V]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const std::int64_t k = lane + 32 * p;
    if (k < packs) load_vec<V>(xr + k * V, v[p]);
  }
}

template <int V, int P, typename T>
__global__ void normalize_rows_warp_kernel(NormGroups g, const T* x, const float* w, const float* b, float eps, T* y,
                                           float* mean, float* rstd) {
  const std::int64_t len = g.channels / g.groups, rows = g.n * g.groups, packs = len / V;
  const int lane = threadIdx.x & 31;
  for (std::int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    float v[P][V];
    load_row_packs<V, P>(x + r * len, packs, v);
    float s = 0.f;
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (lane + 32 * p < packs)
#pragma unroll
        for (int j = 0; j < V; ++j) s += v[p][j];
    const float m = warp_sum(s) / static_cast<float>(len);
    float sq = 0.f;
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (lane + 32 * p < packs)
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float d = v[p][j] - m;
          sq += d * d;
        }
    const float inv = rsqrtf(warp_sum(sq) / static_cast<float>(len) + eps);
    if (lane == 0) {
      mean[r] = m;
      rstd[r] = inv;
    }
    const float* wr = w + (r % g.groups) * len;
    const float* br = b + (r % g.groups) * len;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const std::int64_t k = lane + 32 * p;
      if (k >= packs) continue;
      float o[V];
#pragma unroll
      for (int j = 0; j < V; ++j) o[j] = (v[p][j] - m) * inv * wr[k * V + j] + br[k * V + j];
      store_vec<V>(y + r * len + k * V, o);
    }
  }
}

/// Writes (or, with acc, adds) one row's input gradient from the lane's packs of x and gy:
/// gx = rstd * (gy*w - ma - xhat * mb), ma and mb the row's means of gy*w and gy*w*xhat.
template <int V, int P, bool acc, typename T>
__device__ __forceinline__ void store_row_input_grad(T* gx_row, std::int64_t packs, const float (&xv)[P][V],
                                                     const float (&gv)[P][V], const float* w, float m, float s,
                                                     float ma, float mb) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const std::int64_t k = lane + 32 * p;
    if (k >= packs) continue;
    T* out = gx_row + k * V;
    float o[V];
    if constexpr (acc) load_vec<V>(out, o);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float xhat = (xv[p][j] - m) * s;
      const float v = s * (gv[p][j] * w[k * V + j] - ma - xhat * mb);
      o[j] = acc ? o[j] + v : v;
    }
    store_vec<V>(out, o);
  }
}

// The input's gradient of normalize_rows_warp_kernel's rows, as groups_input_grad_kernel.
template <int V, int P, bool acc, typename T>
__global__ void rows_input_grad_warp_kernel(NormGroups g, const T* x, const T* gy, const float* w, const float* mean,
                                            const float* rstd, T* gx) {
  const std::int64_t len = g.channels / g.groups, rows = g.n * g.groups, packs = len / V;
  const int lane = threadIdx.x & 31;
  for (std::int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    float xv[P][V], gv[P][V];
    load_row_packs<V, P>(x + r * len, packs, xv);
    load_row_packs<V, P>(gy + r * len, packs, gv);
    const float m = mean[r], s = rstd[r];
    const float* wr = w + (r % g.groups) * len;
    float a = 0.f, bsum = 0.f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const std::int64_t k = lane + 32 * p;
      if (k >= packs) continue;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float gw = gv[p][j] * wr[k * V + j];
        a += gw;
        bsum += gw * (xv[p][j] - m) * s;
      }
    }
    store_row_input_grad<V, P, acc>(gx + r * len, packs, xv, gv, wr, m, s, warp_sum(a) / static_cast<float>(len),
                                    warp_sum(bsum) / static_cast<float>(len));
  }
}

// Layer norm (one group, inner 1) backward in one pass over x and gy: the input's gradient as
// rows_input_grad_warp_kernel, and the affine gradients' column sums over the rows this block's
// warps served. A lane's channels are the same in every row, so it sums them in registers; at the
// end the block's warps meet in shared memory in a fixed order and the block writes its partial
// sums to partials[blockIdx.x] (weight's len floats, then bias's), which column_partials_kernel
// adds up over the blocks, again in a fixed order: the result does not depend on timing. Reading
// x and gy once instead of twice matters most for layer norm's column sums, which had only
// len / kColumnTile blocks of parallelism over all the rows.
template <int V, int P, bool acc, typename T>
__global__ void __launch_bounds__(kThreads) rows_backward_warp_kernel(NormGroups g, const T* x, const T* gy,
                                                                      const float* w, const float* mean,
                                                                      const float* rstd, T* gx, float* partials) {
  __shared__ float meet[kRowsPerBlock][32 * V];
  const std::int64_t len = g.channels, rows = g.n, packs = len / V;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float sw[P][V], sb[P][V];
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int j = 0; j < V; ++j) sw[p][j] = sb[p][j] = 0.f;
  for (std::int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    float xv[P][V], gv[P][V];
    load_row_packs<V, P>(x + r * len, packs, xv);
    load_row_packs<V, P>(gy + r * len, packs, gv);
    const float m = mean[r], s = rstd[r];
    float a = 0.f, bsum = 0.f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const std::int64_t k = lane + 32 * p;
      if (k >= packs) continue;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xhat = (xv[p][j] - m) * s;
        const float gw = gv[p][j] * w[k * V + j];
        a += gw;
        bsum += gw * xhat;
        sw[p][j] += gv[p][j] * xhat;
        sb[p][j] += gv[p][j];
      }
    }
    store_row_input_grad<V, P, acc>(gx + r * len, packs, xv, gv, w, m, s, warp_sum(a) / static_cast<float>(len),
                                    warp_sum(bsum) / static_cast<float>(len));
  }
  float* block_part = partials + static_cast<std::int64_t>(blockIdx.x) * 2 * len;
#pragma unroll
  for (int p = 0; p < P; ++p) {
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      __syncthreads();  // meet may still be read for the previous pack
#pragma unroll
      for (int j = 0; j < V; ++j) meet[warp][lane * V + j] = which == 0 ? sw[p][j] : sb[p][j];
      __syncthreads();
      const std::int64_t c = static_cast<std::int64_t>(p) * 32 * V + threadIdx.x;
      if (threadIdx.x < 32 * V && c < len) {
        float t = 0.f;
#pragma unroll
        for (int k = 0; k < kRowsPerBlock; ++k) t += meet[k][threadIdx.x];
        block_part[which * len + c] = t;
      }
    }
  }
}

// Column sums, in a fixed order, of a (rows, cols) float matrix whose rows lie `stride` floats
// apart; column c goes to out[c]. Block (kColumnTile, kColumnRowSlices) owns kColumnTile
// consecutive columns, as the kernel below.
__global__ void column_partials_kernel(const float* partials, std::int64_t rows, std::int64_t cols, std::int64_t stride,
                                       float* out) {
  __shared__ float part[kColumnRowSlices][kColumnTile + 1];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  float t = 0.f;
  if (c < cols)
    for (std::int64_t i = threadIdx.y; i < rows; i += kColumnRowSlices) t += partials[i * stride + c];
  part[threadIdx.y][threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int k = 1; k < kColumnRowSlices; ++k) t += part[k][threadIdx.x];
    out[c] = t;
  }
}

// inner == 1: block (kColumnTile, kColumnRowSlices) owns kColumnTile consecutive channels; a warp
// reads one row's slice of them (coalesced), the slices' partials meet in shared memory.
template <typename T>
__global__ void groups_affine_grad_columns_kernel(NormGroups g, const T* x, const T* gy, const float* mean,
                                                  const float* rstd, float* gw, float* gb) {
  __shared__ float part_w[kColumnRowSlices][kColumnTile + 1];
  __shared__ float part_b[kColumnRowSlices][kColumnTile + 1];
  const std::int64_t cg = g.channels / g.groups;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  float sw = 0.f, sb = 0.f;
  if (c < g.channels) {
    for (std::int64_t i = threadIdx.y; i < g.n; i += kColumnRowSlices) {
      const std::int64_t r = i * g.groups + c / cg, k = i * g.channels + c;
      const float gv = to_float(gy[k]);
      sw += gv * (to_float(x[k]) - mean[r]) * rstd[r];
      sb += gv;
    }
  }
  part_w[threadIdx.y][threadIdx.x] = sw;
  part_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < g.channels) {
    for (int k = 1; k < kColumnRowSlices; ++k) {
      sw += part_w[k][threadIdx.x];
      sb += part_b[k][threadIdx.x];
    }
    gw[c] = sw;
    gb[c] = sb;
  }
}

// inner > 1: one block per channel sums its n runs of `inner` elements.
template <typename T>
__global__ void groups_affine_grad_channel_kernel(NormGroups g, const T* x, const T* gy, const float* mean,
                                                  const float* rstd, float* gw, float* gb) {
  const std::int64_t cg = g.channels / g.groups, total = g.n * g.inner;
  for (std::int64_t c = blockIdx.x; c < g.channels; c += gridDim.x) {
    float sw = 0.f, sb = 0.f;
    for (std::int64_t j = threadIdx.x; j < total; j += blockDim.x) {
      const std::int64_t i = j / g.inner, s = j - i * g.inner;
      const std::int64_t r = i * g.groups + c / cg, k = (i * g.channels + c) * g.inner + s;
      const float gv = to_float(gy[k]);
      sw += gv * (to_float(x[k]) - mean[r]) * rstd[r];
      sb += gv;
    }
    const float2 t = block_sum2(sw, sb);
    if (threadIdx.x == 0) {
      gw[c] = t.x;
      gb[c] = t.y;
    }
  }
}

// ============================================================================================
// launchers
// ============================================================================================

// One block per row (or per channel), at most what keeps every SM busy; the kernels stride.
unsigned block_grid(std::int64_t items, int device) { return grid_for(items, 1, device); }

/// Whether the rows of g take the warp kernels with V-element packs: inner 1, rows that fill at
/// most kMaxPacks packs per lane, and 16-byte aligned row operands (null ones are not checked).
template <typename T>
bool rows_fit_warp(const NormGroups& g, std::initializer_list<const void*> pointers) {
  constexpr int kV = kPack<T>;
  const std::int64_t len = g.groups > 0 ? g.channels / g.groups : 0;
  return g.inner == 1 && len > 0 && len <= 32 * kV * kMaxPacks && packs_fit(static_cast<int>(len), kV, pointers);
}

unsigned warp_row_grid(std::int64_t rows, int device) { return grid_for(rows, kRowsPerBlock, device); }

/// Calls launch(std::integral_constant<int, P>) with the least P of 1, 2, 4, 8 (kMaxPacks) for which
/// 32 lanes of P packs hold a row of `packs` packs.
template <typename Launch>
void with_packs_per_lane(std::int64_t packs, Launch&& launch) {
  static_assert(kMaxPacks == 8, "the cases below go up to kMaxPacks");
  if (packs <= 32) launch(std::integral_constant<int, 1>{});
  else if (packs <= 64) launch(std::integral_constant<int, 2>{});
  else if (packs <= 128) launch(std::integral_constant<int, 4>{});
  else launch(std::integral_constant<int, 8>{});
}

template <typename T>
void launch_normalize_groups(const NormGroups& g, const T* x, const float* w, const float* b, float eps, T* y,
                             float* mean, float* rstd, int device, cudaStream_t stream) {
  const std::int64_t rows = g.n * g.groups;
  if (rows == 0) return;
  if (rows_fit_warp<T>(g, {x, y})) {
    constexpr int kV = kPack<T>;
    with_packs_per_lane(g.channels / g.groups / kV, [&](auto p) {
      normalize_rows_warp_kernel<kV, decltype(p)::value>
          <<<warp_row_grid(rows, device), kThreads, 0, stream>>>(g, x, w, b, eps, y, mean, rstd);
    });
    DPL_CUDA_CHECK(cudaGetLastError());
    return;
  }
  normalize_groups_kernel<<<block_grid(rows, device), kThreads, 0, stream>>>(g, x, w, b, eps, y, mean, rstd);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_groups_input_grad(const NormGroups& g, const T* x, const T* gy, const float* w, const float* mean,
                              const float* rstd, bool acc, T* gx, int device, cudaStream_t stream) {
  const std::int64_t rows = g.n * g.groups;
  if (rows == 0) return;
  if (rows_fit_warp<T>(g, {x, gy, gx})) {
    constexpr int kV = kPack<T>;
    const unsigned grid = warp_row_grid(rows, device);
    with_packs_per_lane(g.channels / g.groups / kV, [&](auto p) {
      constexpr int kP = decltype(p)::value;
      if (acc) rows_input_grad_warp_kernel<kV, kP, true><<<grid, kThreads, 0, stream>>>(g, x, gy, w, mean, rstd, gx);
      else rows_input_grad_warp_kernel<kV, kP, false><<<grid, kThreads, 0, stream>>>(g, x, gy, w, mean, rstd, gx);
    });
    DPL_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const unsigned grid = block_grid(rows, device);
  if (acc) groups_input_grad_kernel<true><<<grid, kThreads, 0, stream>>>(g, x, gy, w, mean, rstd, gx);
  else groups_input_grad_kernel<false><<<grid, kThreads, 0, stream>>>(g, x, gy, w, mean, rstd, gx);
  DPL_CUDA_CHECK(cudaGetLastError());
}

/// Whether layer norm's backward can take rows_backward_warp_kernel: one group of rows that fit
/// the warp kernels.
template <typename T>
bool rows_fit_fused_backward(const NormGroups& g, std::initializer_list<const void*> pointers) {
  return g.groups == 1 && rows_fit_warp<T>(g, pointers);
}

/// The input's gradient and the affine gradients of layer norm in rows_backward_warp_kernel, then
/// the blocks' partial sums added up into gw and gb (either may be null: not wanted).
template <typename T>
void launch_rows_backward(const NormGroups& g, const T* x, const T* gy, const float* w, const float* mean,
                          const float* rstd, bool acc, T* gx, float* gw, float* gb, const Device& device_of_x,
                          int device, cudaStream_t stream) {
  const std::int64_t rows = g.n, len = g.channels;
  if (rows == 0) return;
  constexpr int kV = kPack<T>;
  // Two blocks per multiprocessor: enough rows per warp that the partials cost little next to x
  // and gy, and as many blocks as the kernel's registers let run at once.
  const unsigned grid = static_cast<unsigned>(
      std::min<std::int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, 2 * static_cast<std::int64_t>(sm_count(device))));
  Tensor partials = Tensor::empty({static_cast<std::int64_t>(grid), 2 * len}, TensorOptions(kFloat32, device_of_x));
  float* part = partials.data<float>();
  with_packs_per_lane(len / kV, [&](auto p) {
    constexpr int kP = decltype(p)::value;
    if (acc)
      rows_backward_warp_kernel<kV, kP, true><<<grid, kThreads, 0, stream>>>(g, x, gy, w, mean, rstd, gx, part);
    else
      rows_backward_warp_kernel<kV, kP, false><<<grid, kThreads, 0, stream>>>(g, x, gy, w, mean, rstd, gx, part);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
  // A block's row of partials holds the weight's len channels, then the bias's.
  const unsigned col_grid = static_cast<unsigned>((len + kColumnTile - 1) / kColumnTile);
  const dim3 block(kColumnTile, kColumnRowSlices);
  if (gw != nullptr) column_partials_kernel<<<col_grid, block, 0, stream>>>(part, grid, len, 2 * len, gw);
  DPL_CUDA_CHECK(cudaGetLastError());
  if (gb != nullptr) column_partials_kernel<<<col_grid, block, 0, stream>>>(part + len, grid, len, 2 * len, gb);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_groups_affine_grad(const NormGroups& g, const T* x, const T* gy, const float* mean, const float* rstd,
                               float* gw, float* gb, int device, cudaStream_t stream) {
  if (g.channels == 0) return;
  if (g.inner == 1) {
    const unsigned grid = static_cast<unsigned>((g.channels + kColumnTile - 1) / kColumnTile);
    groups_affine_grad_columns_kernel<<<grid, dim3(kColumnTile, kColumnRowSlices), 0, stream>>>(g, x, gy, mean, rstd,
                                                                                                gw, gb);
  } else {
    groups_affine_grad_channel_kernel<<<block_grid(g.channels, device), kThreads, 0, stream>>>(g, x, gy, mean, rstd,
                                                                                               gw, gb);
  }
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

void normalize_groups_cuda(const NormGroups& g, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                           Tensor& y, Tensor& mean, Tensor& rstd) {
  on_device_typed(x, "normalize_groups", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_normalize_groups(g, in_ptr<T>(x), in_ptr<float>(weight), in_ptr<float>(bias), eps,
                                         out_ptr<T>(y), out_ptr<float>(mean), out_ptr<float>(rstd), d.device(),
                                         d.stream());
  });
}

void normalize_groups_backward_cuda(const NormGroups& g, const Tensor& x, const Tensor& gy, const Tensor& weight,
                                    const Tensor& mean, const Tensor& rstd, float beta, Tensor& gx, Tensor& gweight,
                                    Tensor& gbias) {
  on_device_typed(x, "normalize_groups_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const bool affine = gweight.numel() > 0 || gbias.numel() > 0;
    if (gx.numel() > 0 && affine && cuda_detail::rows_fit_fused_backward<T>(g, {in_ptr<T>(x), in_ptr<T>(gy), out_ptr<T>(gx)})) {
      cuda_detail::launch_rows_backward(g, in_ptr<T>(x), in_ptr<T>(gy), in_ptr<float>(weight), in_ptr<float>(mean),
                                        in_ptr<float>(rstd), beta != 0.f, out_ptr<T>(gx),
                                        gweight.numel() > 0 ? out_ptr<float>(gweight) : nullptr,
                                        gbias.numel() > 0 ? out_ptr<float>(gbias) : nullptr, x.device(), d.device(),
                                        d.stream());
      return;
    }
    if (gx.numel() > 0)
      cuda_detail::launch_groups_input_grad(g, in_ptr<T>(x), in_ptr<T>(gy), in_ptr<float>(weight), in_ptr<float>(mean),
                                            in_ptr<float>(rstd), beta != 0.f, out_ptr<T>(gx), d.device(), d.stream());
    if (gweight.numel() > 0 || gbias.numel() > 0)
      cuda_detail::launch_groups_affine_grad(g, in_ptr<T>(x), in_ptr<T>(gy), in_ptr<float>(mean), in_ptr<float>(rstd),
                                             out_ptr<float>(gweight), out_ptr<float>(gbias), d.device(), d.stream());
  });
}

}  // namespace

DPL_REGISTER_KERNEL(normalize_groups, kCuda, normalize_groups_cuda);
DPL_REGISTER_KERNEL(normalize_groups_backward, kCuda, normalize_groups_backward_cuda);

}  // namespace dpl::backend
