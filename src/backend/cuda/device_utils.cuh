#pragma once
// Device-side building blocks shared by the .cu files: the conversions of the storage types,
// vector loads, warp and block reductions, the dtype switch of the launchers, and the "last
// block finishes the reduction" pattern that gives one-launch, deterministic
// reductions to a single value.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "dpl/core/dtype.hpp"
#include "dpl/core/error.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::backend::cuda_detail {

/// Threads per block of the elementwise and reduction kernels.
constexpr int kThreads = 256;

// --- the device's conversions between the storage types and float -----------------------------
// Every kernel of the backend reads and writes float32, bfloat16 and float16 through these and
// computes in float: 16-bit values are widened on load and rounded once (nearest even) on store.

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

/// V consecutive elements as floats. For float32 and V == 4 they move as one 16-byte access
/// (the pointer must be 16-byte aligned); otherwise element by element.
template <int V>
struct Vec {
  float v[V];
};

template <int V, typename T>
__device__ __forceinline__ Vec<V> load(const T* p) {
  Vec<V> r;
  if constexpr (V == 4 && std::is_same_v<T, float>) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    r.v[0] = t.x;
    r.v[1] = t.y;
    r.v[2] = t.z;
    r.v[3] = t.w;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = to_float(p[j]);
  }
  return r;
}

template <int V, typename T>
__device__ __forceinline__ void store(T* p, const Vec<V>& r) {
  if constexpr (V == 4 && std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = from_float<T>(r.v[j]);
  }
}

/// Calls launch(Index{}) with 32-bit indices when every offset below n fits in them (a kernel's
/// divisions and modulos are then 32-bit, several times cheaper), else 64-bit ones. Host side.
template <typename Launch>
void with_index_type(std::int64_t n, Launch&& launch) {
  if (n < (std::int64_t{1} << 31)) launch(std::uint32_t{});
  else launch(std::int64_t{});
}

/// First index and stride of a grid-stride loop.
__device__ __forceinline__ std::int64_t global_thread() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_threads() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block; the result is valid in thread 0. Every thread of the block must call it.
/// The fixed shuffle tree makes the result independent of timing.
__device__ __forceinline__ double block_sum(double v) {
  __shared__ double warp_part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // warp_part may still be read by an earlier call
  v = warp_sum(v);
  if (lane == 0) warp_part[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  if (warp == 0) {
    v = lane < warps ? warp_part[lane] : 0.0;
    v = warp_sum(v);
  }
  return v;
}

/// Called by every thread of every block with the block's partial in thread 0. Stores it; the
/// block that finishes last sums all partials in block order and returns true, with the total in
/// *total of its thread 0; other blocks return false. Resets the counter for the next launch.
__device__ __forceinline__ bool last_block_total(double block_partial, double* partials, unsigned* counter,
                                                 double* total) {
  __shared__ bool is_last;
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = block_partial;
    __threadfence();  // the partial must be visible before the ticket says it is there
    const unsigned ticket = atomicAdd(counter, 1u);
    is_last = ticket == gridDim.x - 1;
  }
  __syncthreads();
  if (!is_last) return false;
  __threadfence();
  double acc = 0.0;
  for (unsigned i = threadIdx.x; i < gridDim.x; i += blockDim.x) acc += __ldcg(partials + i);
  acc = block_sum(acc);
  if (threadIdx.x == 0) {
    *total = acc;
    *counter = 0u;
  }
  return true;
}

// --- 16-byte channel vectors ------------------------------------------------------------------
// Kernels over channels-last images move V consecutive channels per thread: kPack<T> (16 bytes'
// worth: 8 16-bit or 4 float32 values, one vector load or store) when the channel count and every
// pointer allow it (with_pack_width), else 1.

template <typename T>
constexpr int kPack = static_cast<int>(16 / sizeof(T));

template <int V, typename T>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[V]) {
  if constexpr (V * sizeof(T) == 16) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    T t[V];
    std::memcpy(t, &raw, 16);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = to_float(t[j]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = to_float(p[j]);
  }
}

template <int V, typename T>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[V]) {
  if constexpr (V * sizeof(T) == 16) {
    T t[V];
#pragma unroll
    for (int j = 0; j < V; ++j) t[j] = from_float<T>(in[j]);
    uint4 raw;
    std::memcpy(&raw, t, 16);
    *reinterpret_cast<uint4*>(p) = raw;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = from_float<T>(in[j]);
  }
}

/// The arg-max of row x (cols elements) across one warp: each lane scans elements lane, lane + 32,
/// ..., (with V > 1: packs of V elements lane, lane + 32, ..., loaded 16 bytes at a time, which
/// requires cols % V == 0 and x 16-byte aligned), then the lanes combine in a fixed shuffle tree.
/// beats(av, ai, bv, bi) says whether value av at index ai wins over bv at bi, index cols meaning
/// "none yet"; it must make the winner independent of the order of the comparisons (the first
/// extreme, say), since V changes that order. Every lane of the warp must call it; each gets the
/// winning index (cols for an empty row).
template <int V = 1, typename T, typename Beats>
__device__ __forceinline__ std::int64_t warp_argmax(const T* x, std::int64_t cols, Beats beats) {
  float best = 0.f;
  std::int64_t arg = cols;
  for (std::int64_t k = threadIdx.x & 31; k < cols / V; k += 32) {
    float v[V];
    load_vec<V>(x + k * V, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (beats(v[j], k * V + j, best, arg)) {
        best = v[j];
        arg = k * V + j;
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const std::int64_t oa = __shfl_xor_sync(0xffffffffu, arg, o);
    if (beats(ob, oa, best, arg)) {
      best = ob;
      arg = oa;
    }
  }
  return arg;
}

/// Whether every operand allows V-wide accesses: c a multiple of v and 16-byte aligned pointers
/// (null ones are not checked).
inline bool packs_fit(int c, int v, std::initializer_list<const void*> pointers) {
  if (c % v != 0) return false;
  for (const void* p : pointers)
    if (p != nullptr && reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return true;
}

/// Calls launch(std::integral_constant<int, V>) with the widest V the operands allow.
template <typename T, typename Launch>
void with_pack_width(int c, std::initializer_list<const void*> pointers, Launch&& launch) {
  if (packs_fit(c, kPack<T>, pointers)) launch(std::integral_constant<int, kPack<T>>{});
  else launch(std::integral_constant<int, 1>{});
}

/// A C++ type passed to a generic lambda by with_float_type.
template <typename T>
struct TypeTag {
  using type = T;
};

/// t's elements as device type T (the dispatcher has checked that t's dtype is T's).
template <typename T>
const T* in_ptr(const Tensor& t) {
  return static_cast<const T*>(t.raw_data());
}
template <typename T>
T* out_ptr(Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

/// Calls f(TypeTag<T>{}) with the device type of dtype: float, __nv_bfloat16 or __half.
/// Throws dpl::Error (naming `op`) for any other dtype.
template <typename F>
void with_float_type(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(TypeTag<float>{}); break;
    case DType::kBFloat16: f(TypeTag<__nv_bfloat16>{}); break;
    case DType::kFloat16: f(TypeTag<__half>{}); break;
    default: DPL_FAIL(op, ": expected dtype float32, bfloat16 or float16, got ", dtype);
  }
}

/// The common frame of a float kernel's implementation: makes t's GPU current and calls
/// f(TypeTag<T>{}, device) with T the device type of t's dtype (see with_float_type).
template <typename F>
void on_device_typed(const Tensor& t, const char* op, F&& f) {
  CudaDevice& d = cuda_device_of(t);
  DeviceGuard guard(d.device());
  with_float_type(t.dtype(), op, [&](auto tag) { f(tag, d); });
}

}  // namespace dpl::backend::cuda_detail
