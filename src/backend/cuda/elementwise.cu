// Elementwise maps and reductions: binary ops with broadcasting, where, axpby, fill_scaled,
// scale_by, relu and its backward, column sums (bias gradients) and the sum of all elements.
//
// Every kernel takes float32, bfloat16 or float16 and computes in float (device_utils.cuh).
// PyTorch-style broadcasts (Broadcast::kShape, where) whose operands repeat over leading
// dimensions only take a periodic index instead of the per-dimension one (see load_period).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/broadcast.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/kernels.hpp"

namespace dpl::backend {

namespace cuda_detail {
namespace {

// ============================================================================================
// kernels
// ============================================================================================

template <BinaryOp op>
__device__ __forceinline__ float apply(float a, float b) {
  if constexpr (op == BinaryOp::kAdd) return a + b;
  if constexpr (op == BinaryOp::kSub) return a - b;
  if constexpr (op == BinaryOp::kDiv) return a / b;
  if constexpr (op == BinaryOp::kPow) return powf(a, b);
  if constexpr (op == BinaryOp::kPowGradBase) return b == 0.f ? 0.f : b * powf(a, b - 1.f);
  if constexpr (op == BinaryOp::kPowGradExponent) return a == 0.f && b >= 0.f ? 0.f : powf(a, b) * logf(a);
  return a * b;
}

// PyTorch's broadcasting: each output element finds its operands through the index.
template <BinaryOp op, bool acc, typename T>
__global__ void binary_shape_kernel(BroadcastIndex ix, const T* a, const T* b, T* out, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    std::int64_t off[2];
    ix.offsets(i, off);
    const float v = apply<op>(to_float(a[off[0]]), to_float(b[off[1]]));
    out[i] = from_float<T>(acc ? to_float(out[i]) + v : v);
  }
}

template <typename T>
__global__ void where_kernel(BroadcastIndex ix, const std::uint8_t* cond, const T* a, const T* b, T* out,
                             std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    std::int64_t off[3];
    ix.offsets(i, off);
    out[i] = cond[off[0]] != 0 ? a[off[1]] : b[off[2]];
  }
}

// --- operands broadcast over leading dimensions only ----------------------------------------
// An operand whose shape, after its leading 1s, is the output's trailing extents repeats with
// period m (its element count): output element i reads its element i % m. Same-shape operands
// (m == n), scalars (m == 1), rows (m == the last extent) and masks such as a causal (1, 1, T, T)
// over (B, H, T, T) all take this form, which needs no per-dimension index. Where every operand
// allows, a thread moves V elements (16 bytes of the output) with vector accesses.

/// The period of an operand that does not repeat (the output itself).
constexpr std::int64_t kNoPeriod = INT64_MAX;

/// V raw elements of an operand of period m, for output elements i .. i+V-1. When V > 1, m is 1
/// or a multiple of V and p is aligned to V elements' bytes (the launcher checks).
template <int V, typename T>
__device__ __forceinline__ void load_period(const T* p, std::int64_t m, std::int64_t i, T (&v)[V]) {
  if (m == 1) {
    const T s = p[0];
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = s;
    return;
  }
  const T* q = p + (i < m ? i : i % m);
  if constexpr (V * sizeof(T) == 16) {
    const uint4 raw = *reinterpret_cast<const uint4*>(q);
    std::memcpy(v, &raw, 16);
  } else if constexpr (V * sizeof(T) == 8) {
    const uint2 raw = *reinterpret_cast<const uint2*>(q);
    std::memcpy(v, &raw, 8);
  } else if constexpr (V * sizeof(T) == 4 && V > 1) {
    const unsigned raw = *reinterpret_cast<const unsigned*>(q);
    std::memcpy(v, &raw, 4);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = q[j];
  }
}

/// Stores V raw elements at p (16 bytes, aligned, when V > 1).
template <int V, typename T>
__device__ __forceinline__ void store_raw(T* p, const T (&v)[V]) {
  if constexpr (V > 1) {
    static_assert(V * sizeof(T) == 16, "a vector store moves 16 bytes");
    uint4 raw;
    std::memcpy(&raw, v, 16);
    *reinterpret_cast<uint4*>(p) = raw;
  } else {
    p[0] = v[0];
  }
}

template <BinaryOp op, bool acc, int V, typename T>
__device__ __forceinline__ void binary_period_at(const T* a, std::int64_t ma, const T* b, std::int64_t mb, T* out,
                                                 std::int64_t i) {
  T x[V], y[V], o[V];
  load_period<V>(a, ma, i, x);
  load_period<V>(b, mb, i, y);
  if constexpr (acc) load_period<V>(static_cast<const T*>(out), kNoPeriod, i, o);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const float v = apply<op>(to_float(x[j]), to_float(y[j]));
    o[j] = from_float<T>(acc ? to_float(o[j]) + v : v);
  }
  store_raw<V>(out + i, o);
}

// Output elements [0, n - n % V) V at a time, the rest one at a time.
template <BinaryOp op, bool acc, int V, typename T>
__global__ void binary_period_kernel(const T* a, std::int64_t ma, const T* b, std::int64_t mb, T* out,
                                     std::int64_t n) {
  const std::int64_t packs = n / V;
  for (std::int64_t k = global_thread(); k < packs; k += grid_threads())
    binary_period_at<op, acc, V>(a, ma, b, mb, out, k * V);
  for (std::int64_t i = packs * V + global_thread(); i < n; i += grid_threads())
    binary_period_at<op, acc, 1>(a, ma, b, mb, out, i);
}

// pow's two gradients at elements i .. i+V-1 (16 bytes per access when V > 1); a null output is
// skipped.
template <int V, typename T>
__device__ __forceinline__ void pow_backward_at(const T* a, const T* b, const T* g, T* ga, bool acc_a, T* gb,
                                                bool acc_b, std::int64_t i) {
  T x[V], y[V], d[V], o[V];
  load_period<V>(a, kNoPeriod, i, x);
  load_period<V>(b, kNoPeriod, i, y);
  load_period<V>(g, kNoPeriod, i, d);
  if (ga != nullptr) {
    if (acc_a) load_period<V>(static_cast<const T*>(ga), kNoPeriod, i, o);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float v = to_float(d[j]) * apply<BinaryOp::kPowGradBase>(to_float(x[j]), to_float(y[j]));
      o[j] = from_float<T>(acc_a ? to_float(o[j]) + v : v);
    }
    store_raw<V>(ga + i, o);
  }
  if (gb != nullptr) {
    if (acc_b) load_period<V>(static_cast<const T*>(gb), kNoPeriod, i, o);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float v = to_float(d[j]) * apply<BinaryOp::kPowGradExponent>(to_float(x[j]), to_float(y[j]));
      o[j] = from_float<T>(acc_b ? to_float(o[j]) + v : v);
    }
    store_raw<V>(gb + i, o);
  }
}

template <int V, typename T>
__global__ void pow_backward_kernel(const T* a, const T* b, const T* g, T* ga, bool acc_a, T* gb, bool acc_b,
                                    std::int64_t n) {
  const std::int64_t packs = n / V;
  for (std::int64_t k = global_thread(); k < packs; k += grid_threads())
    pow_backward_at<V>(a, b, g, ga, acc_a, gb, acc_b, k * V);
  for (std::int64_t i = packs * V + global_thread(); i < n; i += grid_threads())
    pow_backward_at<1>(a, b, g, ga, acc_a, gb, acc_b, i);
}

template <int V, typename T>
__device__ __forceinline__ void where_period_at(const std::uint8_t* cond, std::int64_t mc, const T* a,
                                                std::int64_t ma, const T* b, std::int64_t mb, T* out,
                                                std::int64_t i) {
  std::uint8_t c[V];
  T x[V], y[V];
  load_period<V>(cond, mc, i, c);
  load_period<V>(a, ma, i, x);
  load_period<V>(b, mb, i, y);
#pragma unroll
  for (int j = 0; j < V; ++j) x[j] = c[j] != 0 ? x[j] : y[j];
  store_raw<V>(out + i, x);
}

template <int V, typename T>
__global__ void where_period_kernel(const std::uint8_t* cond, std::int64_t mc, const T* a, std::int64_t ma,
                                    const T* b, std::int64_t mb, T* out, std::int64_t n) {
  const std::int64_t packs = n / V;
  for (std::int64_t k = global_thread(); k < packs; k += grid_threads())
    where_period_at<V>(cond, mc, a, ma, b, mb, out, k * V);
  for (std::int64_t i = packs * V + global_thread(); i < n; i += grid_threads())
    where_period_at<1>(cond, mc, a, ma, b, mb, out, i);
}

// out may alias a (linear adds its bias in place).
template <BinaryOp op, Broadcast bc, bool acc, int V, typename T>
__global__ void binary_kernel(const T* a, const T* b, T* out, std::int64_t n, std::int64_t cols) {
  const float s = bc == Broadcast::kScalar ? to_float(b[0]) : 0.f;
  for (std::int64_t k = global_thread(), nv = n / V; k < nv; k += grid_threads()) {
    const std::int64_t i = k * V;
    const Vec<V> x = load<V>(a + i);
    Vec<V> y;
    if constexpr (bc == Broadcast::kNone) {
      y = load<V>(b + i);
    } else if constexpr (bc == Broadcast::kRow) {
      y = load<V>(b + i % cols);  // a row holds a whole number of vectors (cols % V == 0)
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) y.v[j] = s;
    }
    Vec<V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = apply<op>(x.v[j], y.v[j]);
    if constexpr (acc) {
      const Vec<V> o = load<V>(out + i);
#pragma unroll
      for (int j = 0; j < V; ++j) r.v[j] = o.v[j] + r.v[j];
    }
    store<V>(out + i, r);
  }
}

template <bool acc, int V, typename T>
__global__ void axpby_kernel(float alpha, const T* x, float beta, T* y, std::int64_t n) {
  for (std::int64_t k = global_thread(), nv = n / V; k < nv; k += grid_threads()) {
    const std::int64_t i = k * V;
    const Vec<V> xv = load<V>(x + i);
    Vec<V> r;
    if constexpr (acc) {
      const Vec<V> yv = load<V>(y + i);
#pragma unroll
      for (int j = 0; j < V; ++j) r.v[j] = beta * yv.v[j] + alpha * xv.v[j];
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) r.v[j] = alpha * xv.v[j];
    }
    store<V>(y + i, r);
  }
}

template <bool acc, int V, typename T>
__global__ void fill_scaled_kernel(float alpha, const T* s, float beta, T* out, std::int64_t n) {
  const float v = alpha * to_float(s[0]);
  for (std::int64_t k = global_thread(), nv = n / V; k < nv; k += grid_threads()) {
    const std::int64_t i = k * V;
    Vec<V> r;
    if constexpr (acc) {
      const Vec<V> o = load<V>(out + i);
#pragma unroll
      for (int j = 0; j < V; ++j) r.v[j] = beta * o.v[j] + v;
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) r.v[j] = v;
    }
    store<V>(out + i, r);
  }
}

// s[0] of a one-element tensor whose dtype is known at run time only: scale_by's operands may
// each have their own dtype, and a template per triple would build 27 kernels for one loop.
__device__ __forceinline__ float scalar_as_float(const void* s, DType dtype) {
  if (dtype == DType::kBFloat16) return to_float(*static_cast<const __nv_bfloat16*>(s));
  if (dtype == DType::kFloat16) return to_float(*static_cast<const __half*>(s));
  return *static_cast<const float*>(s);
}

// out may be x: each element is read before it is written, by the same thread.
template <bool acc, typename TX, typename TO>
__global__ void scale_by_kernel(const TX* x, const void* s, DType s_dtype, float beta, TO* out, std::int64_t n) {
  const float v = scalar_as_float(s, s_dtype);
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float r = v * to_float(x[i]);
    out[i] = from_float<TO>(acc ? beta * to_float(out[i]) + r : r);
  }
}

template <int V, typename T>
__global__ void relu_kernel(const T* x, T* y, std::int64_t n) {
  for (std::int64_t k = global_thread(), nv = n / V; k < nv; k += grid_threads()) {
    const std::int64_t i = k * V;
    const Vec<V> xv = load<V>(x + i);
    Vec<V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = !(xv.v[j] <= 0.f) ? xv.v[j] : 0.f;  // NaN passes, as in PyTorch
    store<V>(y + i, r);
  }
}

template <bool acc, int V, typename T>
__global__ void relu_backward_kernel(const T* y, const T* gy, T* gx, std::int64_t n) {
  for (std::int64_t k = global_thread(), nv = n / V; k < nv; k += grid_threads()) {
    const std::int64_t i = k * V;
    const Vec<V> yv = load<V>(y + i);
    const Vec<V> g = load<V>(gy + i);
    Vec<V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = yv.v[j] > 0.f ? g.v[j] : 0.f;
    if constexpr (acc) {
      const Vec<V> o = load<V>(gx + i);
#pragma unroll
      for (int j = 0; j < V; ++j) r.v[j] = o.v[j] + r.v[j];
    }
    store<V>(gx + i, r);
  }
}

// A block owns 32 V-column packs; its 32 x kSumRowsY threads walk down a chunk of the rows, reading
// a row's packs as one coalesced access (16 bytes a thread when V > 1), and combine their column
// sums in shared memory in a fixed order. A bias gradient has few columns (768 in GPT-2) over many
// rows (every token), so the rows are cut into gridDim.y chunks to give every multiprocessor work;
// each chunk writes its float column sums to `partials`, whose columns the same kernel then sums
// in one chunk (T float, TOut the output's type). With one chunk a block writes out directly.
constexpr int kSumRowsY = 16;

template <int V, typename T, typename TOut>
__global__ void __launch_bounds__(32 * kSumRowsY)
    sum_rows_kernel(float alpha, const T* x, float beta, TOut* out, std::int64_t rows, std::int64_t cols,
                    std::int64_t rows_per_chunk, float* partials) {
  __shared__ float part[kSumRowsY][32 * V + 1];
  const std::int64_t c0 = (static_cast<std::int64_t>(blockIdx.x) * 32 + threadIdx.x) * V;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * rows_per_chunk;
  const std::int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  float acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = 0.f;
  if (c0 < cols) {
    for (std::int64_t r = begin + threadIdx.y; r < end; r += kSumRowsY) {
      float v[V];
      load_vec<V>(x + r * cols + c0, v);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += v[j];
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) part[threadIdx.y][threadIdx.x * V + j] = acc[j];
  __syncthreads();
  const int t = threadIdx.y * 32 + threadIdx.x;  // one column of the block's 32 V per thread
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * 32 * V + t;
  if (t < 32 * V && c < cols) {
    float total = 0.f;
#pragma unroll
    for (int y = 0; y < kSumRowsY; ++y) total += part[y][t];
    if (gridDim.y == 1)
      out[c] = from_float<TOut>((beta == 0.f ? 0.f : beta * to_float(out[c])) + alpha * total);
    else
      partials[static_cast<std::int64_t>(blockIdx.y) * cols + c] = total;
  }
}

template <int V, typename T>
__global__ void sum_all_kernel(float alpha, const T* x, std::int64_t n, T* out, double* partials,
                               unsigned* counter) {
  double acc = 0.0;
  for (std::int64_t k = global_thread(), nv = n / V; k < nv; k += grid_threads()) {
    const Vec<V> xv = load<V>(x + k * V);
#pragma unroll
    for (int j = 0; j < V; ++j) acc += static_cast<double>(xv.v[j]);
  }
  const double block = block_sum(acc);
  double total = 0.0;
  if (last_block_total(block, partials, counter, &total) && threadIdx.x == 0) {
    out[0] = from_float<T>(static_cast<float>(static_cast<double>(alpha) * total));
  }
}

template <int V, typename T>
__global__ void sum_squares_kernel(const T* x, std::int64_t n, float* out, double* partials, unsigned* counter) {
  double acc = 0.0;
  for (std::int64_t k = global_thread(), nv = n / V; k < nv; k += grid_threads()) {
    float v[V];
    load_vec<V>(x + k * V, v);
#pragma unroll
    for (int j = 0; j < V; ++j) acc += static_cast<double>(v[j]) * static_cast<double>(v[j]);
  }
  const double block = block_sum(acc);
  double total = 0.0;
  if (last_block_total(block, partials, counter, &total) && threadIdx.x == 0) out[0] = static_cast<float>(total);
}

template <int V, typename T>
__global__ void clip_to_norm_kernel(T* x, std::int64_t n, const float* sum_squares, float max_norm) {
  const float norm = sqrtf(sum_squares[0]);
  if (!(norm > max_norm)) return;
  const float scale = max_norm / norm;
  for (std::int64_t k = global_thread(), nv = n / V; k < nv; k += grid_threads()) {
    float v[V];
    load_vec<V>(x + k * V, v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] *= scale;
    store_vec<V>(x + k * V, v);
  }
}

// ============================================================================================
// launchers
// ============================================================================================

// Maps take the 16-byte path when every pointer is 16-byte aligned and the length (and the row
// length of a row broadcast) is a multiple of 4; for 16-bit types that path moves four elements
// per thread with scalar accesses.

template <BinaryOp op, Broadcast bc, typename T>
void launch_binary_bc(bool acc, bool vec, const T* a, const T* b, T* out, std::int64_t n, std::int64_t cols,
                      int device, cudaStream_t stream) {
  const unsigned grid = grid_for(vec ? n / 4 : n, kThreads, device);
  if (vec) {
    if (acc) binary_kernel<op, bc, true, 4><<<grid, kThreads, 0, stream>>>(a, b, out, n, cols);
    else binary_kernel<op, bc, false, 4><<<grid, kThreads, 0, stream>>>(a, b, out, n, cols);
  } else {
    if (acc) binary_kernel<op, bc, true, 1><<<grid, kThreads, 0, stream>>>(a, b, out, n, cols);
    else binary_kernel<op, bc, false, 1><<<grid, kThreads, 0, stream>>>(a, b, out, n, cols);
  }
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <BinaryOp op, typename T>
void launch_binary_op(Broadcast bc, bool acc, bool vec, const T* a, const T* b, T* out, std::int64_t n,
                      std::int64_t cols, int device, cudaStream_t stream) {
  switch (bc) {
    case Broadcast::kNone: launch_binary_bc<op, Broadcast::kNone>(acc, vec, a, b, out, n, cols, device, stream); break;
    case Broadcast::kRow: launch_binary_bc<op, Broadcast::kRow>(acc, vec, a, b, out, n, cols, device, stream); break;
    case Broadcast::kScalar:
      launch_binary_bc<op, Broadcast::kScalar>(acc, vec, a, b, out, n, cols, device, stream);
      break;
    case Broadcast::kShape: DPL_FAIL("binary: the broadcast of shapes takes launch_binary_shape");
  }
}

// Calls launch(std::integral_constant<BinaryOp, op>{}) for the run-time op.
template <typename Launch>
void with_binary_op(BinaryOp op, Launch&& launch) {
  switch (op) {
    case BinaryOp::kAdd: launch(std::integral_constant<BinaryOp, BinaryOp::kAdd>{}); break;
    case BinaryOp::kSub: launch(std::integral_constant<BinaryOp, BinaryOp::kSub>{}); break;
    case BinaryOp::kMul: launch(std::integral_constant<BinaryOp, BinaryOp::kMul>{}); break;
    case BinaryOp::kDiv: launch(std::integral_constant<BinaryOp, BinaryOp::kDiv>{}); break;
    case BinaryOp::kPow: launch(std::integral_constant<BinaryOp, BinaryOp::kPow>{}); break;
    case BinaryOp::kPowGradBase: launch(std::integral_constant<BinaryOp, BinaryOp::kPowGradBase>{}); break;
    case BinaryOp::kPowGradExponent: launch(std::integral_constant<BinaryOp, BinaryOp::kPowGradExponent>{}); break;
  }
}

template <typename T>
void launch_binary_shape(BinaryOp op, bool acc, const BroadcastIndex& ix, const T* a, const T* b, T* out,
                         std::int64_t n, int device, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads, device);
  with_binary_op(op, [&](auto c) {
    constexpr BinaryOp o = decltype(c)::value;
    if (acc) binary_shape_kernel<o, true><<<grid, kThreads, 0, stream>>>(ix, a, b, out, n);
    else binary_shape_kernel<o, false><<<grid, kThreads, 0, stream>>>(ix, a, b, out, n);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

/// The period of an operand of shape s that broadcasts to out over leading dimensions only (see
/// load_period): its element count; -1 when it broadcasts otherwise (a 1 inside its extents).
std::int64_t broadcast_period(const Shape& s, const Shape& out) {
  if (s.size() > out.size()) return -1;
  const std::size_t lead = out.size() - s.size();
  std::size_t k = 0;
  while (k < s.size() && s[k] == 1) ++k;
  std::int64_t m = 1;
  for (; k < s.size(); ++k) {
    if (s[k] != out[lead + k]) return -1;
    m *= s[k];
  }
  return m;
}

/// Whether operand p of period m and `elem`-byte elements allows V-element accesses.
bool period_fits(const void* p, std::int64_t m, int v, std::size_t elem) {
  return m == 1 || (m % v == 0 && reinterpret_cast<std::uintptr_t>(p) % (v * elem) == 0);
}

template <typename T>
void launch_binary_period(BinaryOp op, bool acc, const T* a, std::int64_t ma, const T* b, std::int64_t mb, T* out,
                          std::int64_t n, int device, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kV = kPack<T>;
  const bool vec = aligned16(out) && period_fits(a, ma, kV, sizeof(T)) && period_fits(b, mb, kV, sizeof(T));
  const unsigned grid = grid_for(vec ? n / kV + 1 : n, kThreads, device);
  with_binary_op(op, [&](auto c) {
    constexpr BinaryOp o = decltype(c)::value;
    if (vec && acc) binary_period_kernel<o, true, kV><<<grid, kThreads, 0, stream>>>(a, ma, b, mb, out, n);
    else if (vec) binary_period_kernel<o, false, kV><<<grid, kThreads, 0, stream>>>(a, ma, b, mb, out, n);
    else if (acc) binary_period_kernel<o, true, 1><<<grid, kThreads, 0, stream>>>(a, ma, b, mb, out, n);
    else binary_period_kernel<o, false, 1><<<grid, kThreads, 0, stream>>>(a, ma, b, mb, out, n);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_where_period(const std::uint8_t* cond, std::int64_t mc, const T* a, std::int64_t ma, const T* b,
                         std::int64_t mb, T* out, std::int64_t n, int device, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kV = kPack<T>;
  const bool vec = aligned16(out) && period_fits(cond, mc, kV, 1) && period_fits(a, ma, kV, sizeof(T)) &&
                   period_fits(b, mb, kV, sizeof(T));
  const unsigned grid = grid_for(vec ? n / kV + 1 : n, kThreads, device);
  if (vec) where_period_kernel<kV><<<grid, kThreads, 0, stream>>>(cond, mc, a, ma, b, mb, out, n);
  else where_period_kernel<1><<<grid, kThreads, 0, stream>>>(cond, mc, a, ma, b, mb, out, n);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_binary(BinaryOp op, Broadcast bc, bool acc, const T* a, const T* b, T* out, std::int64_t n,
                   std::int64_t cols, int device, cudaStream_t stream) {
  if (n == 0) return;
  bool vec = n % 4 == 0 && aligned16(a) && aligned16(out);
  if (bc == Broadcast::kNone) vec = vec && aligned16(b);
  if (bc == Broadcast::kRow) vec = vec && cols % 4 == 0 && aligned16(b);
  with_binary_op(op, [&](auto c) {
    launch_binary_op<decltype(c)::value>(bc, acc, vec, a, b, out, n, cols, device, stream);
  });
}

template <typename T>
void launch_where(const BroadcastIndex& ix, const std::uint8_t* cond, const T* a, const T* b, T* out, std::int64_t n,
                  int device, cudaStream_t stream) {
  if (n == 0) return;
  where_kernel<<<grid_for(n, kThreads, device), kThreads, 0, stream>>>(ix, cond, a, b, out, n);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_axpby(float alpha, const T* x, float beta, T* y, std::int64_t n, int device, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = n % 4 == 0 && aligned16(x) && aligned16(y);
  const bool acc = beta != 0.f;
  const unsigned grid = grid_for(vec ? n / 4 : n, kThreads, device);
  if (vec) {
    if (acc) axpby_kernel<true, 4><<<grid, kThreads, 0, stream>>>(alpha, x, beta, y, n);
    else axpby_kernel<false, 4><<<grid, kThreads, 0, stream>>>(alpha, x, beta, y, n);
  } else {
    if (acc) axpby_kernel<true, 1><<<grid, kThreads, 0, stream>>>(alpha, x, beta, y, n);
    else axpby_kernel<false, 1><<<grid, kThreads, 0, stream>>>(alpha, x, beta, y, n);
  }
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_fill_scaled(float alpha, const T* s, float beta, T* out, std::int64_t n, int device, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = n % 4 == 0 && aligned16(out);
  const bool acc = beta != 0.f;
  const unsigned grid = grid_for(vec ? n / 4 : n, kThreads, device);
  if (vec) {
    if (acc) fill_scaled_kernel<true, 4><<<grid, kThreads, 0, stream>>>(alpha, s, beta, out, n);
    else fill_scaled_kernel<false, 4><<<grid, kThreads, 0, stream>>>(alpha, s, beta, out, n);
  } else {
    if (acc) fill_scaled_kernel<true, 1><<<grid, kThreads, 0, stream>>>(alpha, s, beta, out, n);
    else fill_scaled_kernel<false, 1><<<grid, kThreads, 0, stream>>>(alpha, s, beta, out, n);
  }
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename TX, typename TO>
void launch_scale_by(const TX* x, const void* s, DType s_dtype, float beta, TO* out, std::int64_t n, int device,
                     cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads, device);
  if (beta != 0.f) scale_by_kernel<true><<<grid, kThreads, 0, stream>>>(x, s, s_dtype, beta, out, n);
  else scale_by_kernel<false><<<grid, kThreads, 0, stream>>>(x, s, s_dtype, beta, out, n);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_relu(const T* x, T* y, std::int64_t n, int device, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = n % 4 == 0 && aligned16(x) && aligned16(y);
  const unsigned grid = grid_for(vec ? n / 4 : n, kThreads, device);
  if (vec) relu_kernel<4><<<grid, kThreads, 0, stream>>>(x, y, n);
  else relu_kernel<1><<<grid, kThreads, 0, stream>>>(x, y, n);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_relu_backward(const T* y, const T* gy, bool acc, T* gx, std::int64_t n, int device, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = n % 4 == 0 && aligned16(y) && aligned16(gy) && aligned16(gx);
  const unsigned grid = grid_for(vec ? n / 4 : n, kThreads, device);
  if (vec) {
    if (acc) relu_backward_kernel<true, 4><<<grid, kThreads, 0, stream>>>(y, gy, gx, n);
    else relu_backward_kernel<false, 4><<<grid, kThreads, 0, stream>>>(y, gy, gx, n);
  } else {
    if (acc) relu_backward_kernel<true, 1><<<grid, kThreads, 0, stream>>>(y, gy, gx, n);
    else relu_backward_kernel<false, 1><<<grid, kThreads, 0, stream>>>(y, gy, gx, n);
  }
  DPL_CUDA_CHECK(cudaGetLastError());
}

/// How many chunks sum_rows_kernel cuts `rows` into: enough blocks for about four per
/// multiprocessor, but at least four rows per thread of a chunk.
std::int64_t sum_rows_chunks(std::int64_t rows, std::int64_t column_blocks, int device) {
  const std::int64_t want = (4 * static_cast<std::int64_t>(sm_count(device)) + column_blocks - 1) / column_blocks;
  const std::int64_t most = (rows + 4 * kSumRowsY - 1) / (4 * kSumRowsY);
  return std::max<std::int64_t>(1, std::min(want, most));
}

/// Column sums of x (rows, cols) into out, chunks of rows at a time (sum_rows_kernel).
template <typename T, typename TOut>
void launch_column_sums(float alpha, const T* x, float beta, TOut* out, std::int64_t rows, std::int64_t cols,
                        std::int64_t chunks, float* partials, cudaStream_t stream) {
  with_pack_width<T>(static_cast<int>(cols), {x}, [&](auto v) {
    constexpr int kV = decltype(v)::value;
    const dim3 grid(static_cast<unsigned>((cols + 32 * kV - 1) / (32 * kV)), static_cast<unsigned>(chunks));
    sum_rows_kernel<kV><<<grid, dim3(32, kSumRowsY), 0, stream>>>(alpha, x, beta, out, rows, cols,
                                                                   (rows + chunks - 1) / chunks, partials);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_sum_rows(float alpha, const T* x, float beta, T* out, std::int64_t rows, std::int64_t cols,
                     const Device& device_of_x, int device, cudaStream_t stream) {
  if (cols == 0) return;
  const std::int64_t column_blocks = (cols + 32 * kPack<T> - 1) / (32 * kPack<T>);
  const std::int64_t chunks = sum_rows_chunks(rows, column_blocks, device);
  if (chunks == 1) {
    launch_column_sums<T, T>(alpha, x, beta, out, rows, cols, 1, nullptr, stream);
    return;
  }
  Tensor partials = Tensor::empty({chunks, cols}, TensorOptions(kFloat32, device_of_x));
  launch_column_sums<T, float>(1.f, x, 0.f, nullptr, rows, cols, chunks, partials.data<float>(), stream);
  launch_column_sums<float, T>(alpha, partials.data<float>(), beta, out, chunks, cols, 1, nullptr, stream);
}

template <typename T>
void launch_sum_squares(const T* x, std::int64_t n, float* out, const CudaDevice::ReduceScratch& s, int device,
                        cudaStream_t stream) {
  with_pack_width<T>(n % kPack<T> == 0 ? kPack<T> : 1, {x}, [&](auto v) {
    constexpr int kV = decltype(v)::value;
    const unsigned grid = std::min<unsigned>(grid_for(n / kV, kThreads, device), CudaDevice::kMaxReduceBlocks);
    sum_squares_kernel<kV><<<grid, kThreads, 0, stream>>>(x, n, out, s.partials, s.counter);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_clip_to_norm(T* x, std::int64_t n, const float* sum_squares, float max_norm, int device,
                         cudaStream_t stream) {
  if (n == 0) return;
  with_pack_width<T>(n % kPack<T> == 0 ? kPack<T> : 1, {x}, [&](auto v) {
    constexpr int kV = decltype(v)::value;
    clip_to_norm_kernel<kV><<<grid_for(n / kV, kThreads, device), kThreads, 0, stream>>>(x, n, sum_squares, max_norm);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_sum_all(float alpha, const T* x, std::int64_t n, T* out, const CudaDevice::ReduceScratch& s, int device,
                    cudaStream_t stream) {
  const bool vec = n % 4 == 0 && aligned16(x);
  unsigned grid = grid_for(vec ? n / 4 : n, kThreads, device);
  if (grid > static_cast<unsigned>(CudaDevice::kMaxReduceBlocks)) grid = CudaDevice::kMaxReduceBlocks;
  if (vec) sum_all_kernel<4><<<grid, kThreads, 0, stream>>>(alpha, x, n, out, s.partials, s.counter);
  else sum_all_kernel<1><<<grid, kThreads, 0, stream>>>(alpha, x, n, out, s.partials, s.counter);
  DPL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace cuda_detail

// ============================================================================================
// kernel implementations
// ============================================================================================

namespace {

using cuda_detail::in_ptr;
using cuda_detail::out_ptr;
using cuda_detail::on_device_typed;

void binary_cuda(BinaryOp op, Broadcast bc, const Tensor& a, const Tensor& b, float beta, Tensor& o) {
  on_device_typed(a, "binary", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    if (bc == Broadcast::kShape) {
      const std::int64_t ma = cuda_detail::broadcast_period(a.shape(), o.shape());
      const std::int64_t mb = cuda_detail::broadcast_period(b.shape(), o.shape());
      if (ma > 0 && mb > 0) {
        cuda_detail::launch_binary_period(op, beta != 0.f, in_ptr<T>(a), ma, in_ptr<T>(b), mb, out_ptr<T>(o),
                                          o.numel(), d.device(), d.stream());
        return;
      }
      cuda_detail::launch_binary_shape(op, beta != 0.f, make_broadcast_index(o.shape(), {&a.shape(), &b.shape()}),
                                       in_ptr<T>(a), in_ptr<T>(b), out_ptr<T>(o), o.numel(), d.device(), d.stream());
      return;
    }
    cuda_detail::launch_binary(op, bc, beta != 0.f, in_ptr<T>(a), in_ptr<T>(b), out_ptr<T>(o), a.numel(),
                               bc == Broadcast::kRow ? b.numel() : 1, d.device(), d.stream());
  });
}

void where_cuda(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& o) {
  on_device_typed(a, "where", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const auto* c = static_cast<const std::uint8_t*>(cond.raw_data());
    const std::int64_t mc = cuda_detail::broadcast_period(cond.shape(), o.shape());
    const std::int64_t ma = cuda_detail::broadcast_period(a.shape(), o.shape());
    const std::int64_t mb = cuda_detail::broadcast_period(b.shape(), o.shape());
    if (mc > 0 && ma > 0 && mb > 0) {
      cuda_detail::launch_where_period(c, mc, in_ptr<T>(a), ma, in_ptr<T>(b), mb, out_ptr<T>(o), o.numel(),
                                       d.device(), d.stream());
      return;
    }
    cuda_detail::launch_where(make_broadcast_index(o.shape(), {&cond.shape(), &a.shape(), &b.shape()}),
                              static_cast<const std::uint8_t*>(cond.raw_data()), in_ptr<T>(a), in_ptr<T>(b),
                              out_ptr<T>(o), o.numel(), d.device(), d.stream());
  });
}

void pow_backward_cuda(const Tensor& base, const Tensor& exponent, const Tensor& gy, float beta_base,
                       Tensor* grad_base, float beta_exponent, Tensor* grad_exponent) {
  const std::int64_t n = gy.numel();
  if (n == 0 || (grad_base == nullptr && grad_exponent == nullptr)) return;
  on_device_typed(gy, "pow_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    constexpr int kV = 16 / sizeof(T);
    T* ga = grad_base != nullptr ? out_ptr<T>(*grad_base) : nullptr;
    T* gb = grad_exponent != nullptr ? out_ptr<T>(*grad_exponent) : nullptr;
    const T *a = in_ptr<T>(base), *b = in_ptr<T>(exponent), *g = in_ptr<T>(gy);
    using cuda_detail::aligned16;
    const bool vec = aligned16(a) && aligned16(b) && aligned16(g) && (ga == nullptr || aligned16(ga)) &&
                     (gb == nullptr || aligned16(gb));
    const bool acc_a = beta_base != 0.f, acc_b = beta_exponent != 0.f;
    if (vec) {
      const unsigned grid = cuda_detail::grid_for(n / kV + 1, cuda_detail::kThreads, d.device());
      cuda_detail::pow_backward_kernel<kV>
          <<<grid, cuda_detail::kThreads, 0, d.stream()>>>(a, b, g, ga, acc_a, gb, acc_b, n);
    } else {
      const unsigned grid = cuda_detail::grid_for(n, cuda_detail::kThreads, d.device());
      cuda_detail::pow_backward_kernel<1>
          <<<grid, cuda_detail::kThreads, 0, d.stream()>>>(a, b, g, ga, acc_a, gb, acc_b, n);
    }
    DPL_CUDA_CHECK(cudaGetLastError());
  });
}

void axpby_cuda(float alpha, const Tensor& x, float beta, Tensor& y) {
  on_device_typed(x, "axpby", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_axpby(alpha, in_ptr<T>(x), beta, out_ptr<T>(y), x.numel(), d.device(), d.stream());
  });
}

void sum_rows_cuda(float alpha, const Tensor& x, float beta, Tensor& o) {
  const std::int64_t cols = o.numel();
  const std::int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  on_device_typed(x, "sum_rows", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_sum_rows(alpha, in_ptr<T>(x), beta, out_ptr<T>(o), rows, cols, x.device(), d.device(),
                                 d.stream());
  });
}

void sum_squares_cuda(const Tensor& x, Tensor& o) {
  on_device_typed(x, "sum_squares", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_sum_squares(in_ptr<T>(x), x.numel(), out_ptr<float>(o), d.scratch(), d.device(), d.stream());
  });
}

void clip_to_norm_cuda(Tensor& x, const Tensor& sum_squares, float max_norm) {
  on_device_typed(x, "clip_to_norm", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_clip_to_norm(out_ptr<T>(x), x.numel(), in_ptr<float>(sum_squares), max_norm, d.device(),
                                     d.stream());
  });
}

void sum_all_cuda(float alpha, const Tensor& x, Tensor& o) {
  on_device_typed(x, "sum_all", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_sum_all(alpha, in_ptr<T>(x), x.numel(), out_ptr<T>(o), d.scratch(), d.device(), d.stream());
  });
}

void fill_scaled_cuda(float alpha, const Tensor& s, float beta, Tensor& o) {
  on_device_typed(s, "fill_scaled", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_fill_scaled(alpha, in_ptr<T>(s), beta, out_ptr<T>(o), o.numel(), d.device(), d.stream());
  });
}

void scale_by_cuda(const Tensor& x, const Tensor& s, float beta, Tensor& o) {
  on_device_typed(x, "scale_by", [&](auto tx, CudaDevice& d) {
    using TX = typename decltype(tx)::type;
    cuda_detail::with_float_type(o.dtype(), "scale_by", [&](auto to) {
      using TO = typename decltype(to)::type;
      cuda_detail::launch_scale_by(in_ptr<TX>(x), s.raw_data(), s.dtype(), beta, out_ptr<TO>(o), x.numel(),
                                   d.device(), d.stream());
    });
  });
}

void relu_cuda(const Tensor& x, Tensor& y) {
  on_device_typed(x, "relu", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_relu(in_ptr<T>(x), out_ptr<T>(y), x.numel(), d.device(), d.stream());
  });
}

void relu_backward_cuda(const Tensor& y, const Tensor& gy, float beta, Tensor& gx) {
  on_device_typed(y, "relu_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_relu_backward(in_ptr<T>(y), in_ptr<T>(gy), beta != 0.f, out_ptr<T>(gx), y.numel(), d.device(),
                                      d.stream());
  });
}

}  // namespace

DPL_REGISTER_KERNEL(binary, kCuda, binary_cuda);
DPL_REGISTER_KERNEL(where, kCuda, where_cuda);
DPL_REGISTER_KERNEL(pow_backward, kCuda, pow_backward_cuda);
DPL_REGISTER_KERNEL(axpby, kCuda, axpby_cuda);
DPL_REGISTER_KERNEL(sum_rows, kCuda, sum_rows_cuda);
DPL_REGISTER_KERNEL(sum_all, kCuda, sum_all_cuda);
DPL_REGISTER_KERNEL(sum_squares, kCuda, sum_squares_cuda);
DPL_REGISTER_KERNEL(clip_to_norm, kCuda, clip_to_norm_cuda);
DPL_REGISTER_KERNEL(fill_scaled, kCuda, fill_scaled_cuda);
DPL_REGISTER_KERNEL(scale_by, kCuda, scale_by_cuda);
DPL_REGISTER_KERNEL(relu, kCuda, relu_cuda);
DPL_REGISTER_KERNEL(relu_backward, kCuda, relu_backward_cuda);

}  // namespace dpl::backend
