#include "backend/cuda/batch_norm_nhwc.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/max_pool_window.cuh"

namespace dpl::backend::cuda_detail {

namespace {

// Every kernel moves V consecutive channels of a row per thread (kPack, load_vec and store_vec
// in device_utils.cuh): 16 bytes' worth when the channel count and every pointer allow it, else 1.
// The row loops are memory-bound; scalar 2-byte accesses left half of the bandwidth unused, and
// a division per element made the moments pass compute-bound.

// A per-channel parameter (weight or bias) in its own dtype: float32, or the 16-bit dtype of a
// model that optim::MixedPrecision cast. Reading it here, once per channel, replaces a float32
// copy of each parameter per call: four conversion kernels and two accumulations per batch norm
// and step, hundreds of launches in a ResNet step for a few hundred floats each.
struct ChannelParam {
  const void* data = nullptr;
  DType dtype = kFloat32;
  __device__ __forceinline__ float operator[](int ch) const {
    switch (dtype) {
      case kBFloat16: return to_float(static_cast<const __nv_bfloat16*>(data)[ch]);
      case kFloat16: return to_float(static_cast<const __half*>(data)[ch]);
      default: return static_cast<const float*>(data)[ch];
    }
  }
};

// A parameter's gradient in the parameter's dtype, g = beta * g + v once per channel (rounded
// once, here). Accumulating in place saves a parameter whose gradient buffer already holds a
// contribution (every step, once the buffers exist) a conversion and an addition kernel.
struct ChannelGrad {
  void* data = nullptr;
  DType dtype = kFloat32;
  float beta = 0.f;
  template <typename T>
  __device__ __forceinline__ void store_as(int ch, float v) const {
    T* p = static_cast<T*>(data) + ch;
    *p = from_float<T>(beta != 0.f ? __fmaf_rn(beta, to_float(*p), v) : v);
  }
  __device__ __forceinline__ void store(int ch, float v) const {
    switch (dtype) {
      case kBFloat16: store_as<__nv_bfloat16>(ch, v); break;
      case kFloat16: store_as<__half>(ch, v); break;
      default: store_as<float>(ch, v);
    }
  }
};

ChannelParam channel_param(const Tensor& t) {
  DPL_CHECK(is_float_dtype(t.dtype()) && t.is_contiguous(),
            "batch_norm (channels-last): expected a contiguous weight or bias of a float dtype, got ", t.dtype());
  return {t.raw_data(), t.dtype()};
}
ChannelGrad channel_grad(Tensor& t, float beta) {
  DPL_CHECK(is_float_dtype(t.dtype()) && t.is_contiguous(),
            "batch_norm backward (channels-last): expected contiguous parameter gradients of a float dtype, got ",
            t.dtype());
  return {t.raw_data(), t.dtype(), beta};
}

__device__ __forceinline__ float2 combine(float2 a, float2 b) { return {a.x + b.x, a.y + b.y}; }

// Reduction blocks: blockDim.x threads across channel vectors, blockDim.y row lanes; blockIdx.y
// splits the rows into groups. Each thread's V partials are reduced over the block's row lanes in
// shared memory (a tree, so the depth is log2 of the lanes) and written as one partial per
// (group, channel).
constexpr int kReduceThreads = 256;
// Rows whose loads a reduction thread issues before using any of them.
constexpr int kRowsInFlight = 4;

template <int V, typename P>
__device__ __forceinline__ void reduce_lanes_and_store(P (&acc)[V], P* shared, int c, int ch0, P* partial) {
  const int tx = threadIdx.x, ty = threadIdx.y, nx = blockDim.x, ny = blockDim.y;
#pragma unroll
  for (int j = 0; j < V; ++j) shared[(ty * nx + tx) * V + j] = acc[j];
  __syncthreads();
  int span = 1;
  while (span < ny) span <<= 1;
  for (int s = span >> 1; s > 0; s >>= 1) {
    if (ty < s && ty + s < ny) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        P& mine = shared[(ty * nx + tx) * V + j];
        mine = combine(mine, shared[((ty + s) * nx + tx) * V + j]);
      }
    }
    __syncthreads();
  }
  if (ty != 0 || ch0 >= c) return;
#pragma unroll
  for (int j = 0; j < V; ++j) partial[static_cast<std::int64_t>(blockIdx.y) * c + ch0 + j] = shared[tx * V + j];
}

// Per-channel moments of the rows of x (rows x c) as sums of d = x - shift and of d squared, with
// the channel's value in the first row as its shift (written to `shift` by the first row group):
// subtracting a value of the data keeps the sums' cancellation small whatever the mean, and with
// one shift for all the partials add up plainly. Welford's update instead costs a division per
// row and a dependent chain per element, which kept this pass at about 60% of the memory rate.
template <typename T, int V>
__global__ void __launch_bounds__(kReduceThreads) moments_kernel(const T* x, std::int64_t rows, int c, float2* partial,
                                                                 float* shift) {
  extern __shared__ unsigned char smem[];
  const int ch0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  float2 acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = {0.f, 0.f};
  if (ch0 < c) {
    float x0[V];
    load_vec<V>(x + ch0, x0);
    if (blockIdx.y == 0 && threadIdx.y == 0) {
#pragma unroll
      for (int j = 0; j < V; ++j) shift[ch0 + j] = x0[j];
    }
    const std::int64_t step = static_cast<std::int64_t>(gridDim.y) * blockDim.y;
    auto add = [&](const float (&v)[V]) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float d = v[j] - x0[j];
        acc[j].x += d;
        acc[j].y = __fmaf_rn(d, d, acc[j].y);
      }
    };
    std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    // The loads of kRowsInFlight rows are issued before their sums (in row order, so the same bits
    // as one row at a time): one 16-byte load in flight per thread left the pass waiting on memory.
    for (; r + (kRowsInFlight - 1) * step < rows; r += kRowsInFlight * step) {
      float v[kRowsInFlight][V];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) load_vec<V>(x + (r + u * step) * c + ch0, v[u]);
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) add(v[u]);
    }
    for (; r < rows; r += step) {
      float v[V];
      load_vec<V>(x + r * c + ch0, v);
      add(v);
    }
  }
  reduce_lanes_and_store<V>(acc, reinterpret_cast<float2*>(smem), c, ch0, partial);
}

// The affine map y = x * scale + shift with scale = invstd * weight and shift = bias - mean *
// scale, each step rounded explicitly, so that the forward pass and a backward pass that
// recomputes a pre-activation (ReluMask below) get the same bits whatever the compiler contracts.
__device__ __forceinline__ float affine_scale(float invstd, float weight) { return __fmul_rn(invstd, weight); }
__device__ __forceinline__ float affine_shift(float mean, float scale, float bias) {
  return __fmaf_rn(-mean, scale, bias);
}
__device__ __forceinline__ float affine(float x, float scale, float shift) { return __fmaf_rn(x, scale, shift); }
// Whether the ReLU passed the value at pre-activation x * scale + shift, rounded to T as y was: a
// positive pre-activation too small for a 16-bit type made y zero.
template <typename T>
__device__ __forceinline__ bool relu_passes(float x, float scale, float shift) {
  return to_float(from_float<T>(affine(x, scale, shift))) > 0.f;
}
__device__ __forceinline__ float rectified(float v) { return v > 0.f ? v : (v == v ? 0.f : v); }  // NaN stays NaN

// How backward masks gy for a fused ReLU: not at all (no ReLU), by y > 0 (y given: needed when a
// residual was added before the ReLU), or by recomputing the pre-activation x * scale + shift
// from x, which backward reads anyway (bias given). The recomputation repeats the forward pass's
// rounded operations on the same operands, rounding to T last as y was, so its sign is y's; it
// saves reading y, a third of what the backward passes of a batch norm without a residual read.
template <typename T>
struct ReluMask {
  const T* y = nullptr;
  ChannelParam weight, bias;  // bias.data null: no recomputation
  const float* invstd = nullptr;
};

// Scale and shift of channels ch0..ch0+V-1 when the mask recomputes the pre-activation.
template <int V, typename T>
__device__ __forceinline__ void mask_affine(const ReluMask<T>& m, const float* mean, int ch0, float (&scale)[V],
                                            float (&shift)[V]) {
  if (m.bias.data == nullptr) return;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    scale[j] = affine_scale(m.invstd[ch0 + j], m.weight[ch0 + j]);
    shift[j] = affine_shift(mean[ch0 + j], scale[j], m.bias[ch0 + j]);
  }
}

// Backward's per-element inputs at element i: x, and g = gy masked by y > 0 when y is given,
// else by the recomputed pre-activation (scale and shift of the vector's channels) when
// `recompute`, else not masked.
template <int V, typename T, typename Index>
__device__ __forceinline__ void load_grad_and_input(const T* x, const T* y, bool recompute, const T* gy, Index i,
                                                    const float (&scale)[V], const float (&shift)[V], float (&g)[V],
                                                    float (&xv)[V]) {
  load_vec<V>(gy + i, g);
  load_vec<V>(x + i, xv);
  if (y != nullptr) {
    float yv[V];
    load_vec<V>(y + i, yv);
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (!(yv[j] > 0.f)) g[j] = 0.f;
  } else if (recompute) {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (!relu_passes<T>(xv[j], scale[j], shift[j])) g[j] = 0.f;
  }
}

// V per-channel floats from p (channel ch0 onwards): 16-byte loads when V is a multiple of 4 (the
// per-channel arrays start 16-byte aligned, and ch0 is a multiple of V). The elementwise passes
// load several such vectors per V elements; one scalar load per channel and array kept the
// 16-bit kernels busy issuing loads.
template <int V>
__device__ __forceinline__ void load_channels(const float* p, float (&out)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int k = 0; k < V / 4; ++k) {
      const float4 t = reinterpret_cast<const float4*>(p)[k];
      out[4 * k] = t.x;
      out[4 * k + 1] = t.y;
      out[4 * k + 2] = t.z;
      out[4 * k + 3] = t.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = p[j];
  }
}

// One backward-reduction thread's sums, per channel of ch0..ch0+V-1, of g and of g * (x - mean),
// and their block's partial (reduce_lanes_and_store). Zero for a thread past the channels.
template <int V>
struct GradSums {
  float2 acc[V];
  float mu[V];

  __device__ __forceinline__ GradSums(const float* mean, int c, int ch0) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      acc[j] = {0.f, 0.f};
      mu[j] = ch0 < c ? mean[ch0 + j] : 0.f;
    }
  }
  __device__ __forceinline__ void add(const float (&g)[V], const float (&xv)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      acc[j].x += g[j];
      acc[j].y += g[j] * (xv[j] - mu[j]);
    }
  }
  __device__ __forceinline__ void store(unsigned char* smem, int c, int ch0, float2* partial) {
    reduce_lanes_and_store<V>(acc, reinterpret_cast<float2*>(smem), c, ch0, partial);
  }
};

// Backward reduction: per channel the sums of g and of g * (x - mean), g = gy masked by `m`.
// When g_out is given, g is also stored there (the residual's gradient): the elementwise pass
// then reads g back instead of gy and y.
template <typename T, int V>
__global__ void __launch_bounds__(kReduceThreads) grad_sums_kernel(const T* x, ReluMask<T> m, const T* gy,
                                                                   const float* mean, std::int64_t rows, int c,
                                                                   float2* partial, T* g_out) {
  extern __shared__ unsigned char smem[];
  const int ch0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  GradSums<V> sums(mean, c, ch0);
  if (ch0 < c) {
    float scale[V], shift[V];
    mask_affine<V>(m, mean, ch0, scale, shift);
    const std::int64_t step = static_cast<std::int64_t>(gridDim.y) * blockDim.y;
    std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    // As in moments_kernel: the loads of kRowsInFlight rows first, the sums after, in row order.
    for (; r + (kRowsInFlight - 1) * step < rows; r += kRowsInFlight * step) {
      float g[kRowsInFlight][V], xv[kRowsInFlight][V];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u)
        load_grad_and_input<V>(x, m.y, m.bias.data != nullptr, gy, (r + u * step) * c + ch0, scale, shift, g[u], xv[u]);
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        if (g_out != nullptr) store_vec<V>(g_out + (r + u * step) * c + ch0, g[u]);
        sums.add(g[u], xv[u]);
      }
    }
    for (; r < rows; r += step) {
      const std::int64_t i = r * c + ch0;
      float g[V], xv[V];
      load_grad_and_input<V>(x, m.y, m.bias.data != nullptr, gy, i, scale, shift, g, xv);
      if (g_out != nullptr) store_vec<V>(g_out + i, g);
      sums.add(g, xv);
    }
  }
  sums.store(smem, c, ch0, partial);
}

// The finalize kernels: a block of 8 channels x 128 lanes; each lane combines every 128th group's
// partial, four loads in flight at a time, then the lanes combine in a tree. The partials come
// from L2 and the kernel is latency-bound: a loop of one dependent load per group took tens of
// microseconds a call, and 32 lanes a channel (a dozen loads each for the ~400 row groups of a
// reduction) still 6-8; many lanes make it one round of loads, and narrow blocks give the
// 64-channel layers more than two blocks.
constexpr int kFinalChannels = 8;
constexpr int kFinalLanes = 128;

template <typename P>
__device__ __forceinline__ bool combine_groups(const P* partial, int groups, int c, P* shared, P& out) {
  const int ch = blockIdx.x * kFinalChannels + threadIdx.x;
  P acc{};
  if (ch < c) {
    int g = threadIdx.y;
    for (; g + 3 * kFinalLanes < groups; g += 4 * kFinalLanes) {
      P p[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) p[k] = partial[static_cast<std::int64_t>(g + k * kFinalLanes) * c + ch];
#pragma unroll
      for (int k = 0; k < 4; ++k) acc = combine(acc, p[k]);
    }
    for (; g < groups; g += kFinalLanes) acc = combine(acc, partial[static_cast<std::int64_t>(g) * c + ch]);
  }
  shared[threadIdx.y * kFinalChannels + threadIdx.x] = acc;
  __syncthreads();
  for (int s = kFinalLanes / 2; s > 0; s >>= 1) {
    if (threadIdx.y < s) {
      P& mine = shared[threadIdx.y * kFinalChannels + threadIdx.x];
      mine = combine(mine, shared[(threadIdx.y + s) * kFinalChannels + threadIdx.x]);
    }
    __syncthreads();
  }
  if (threadIdx.y != 0 || ch >= c) return false;
  out = shared[threadIdx.x];
  return true;
}

// The variance from the mean square and the mean, clamped at 0 where rounding takes it below.
__device__ __forceinline__ float variance_of(float mean_square, float mean) {
  return fmaxf(__fsub_rn(mean_square, __fmul_rn(mean, mean)), 0.f);
}

// Channel ch's batch statistics from its mean and biased variance over `count` rows: save_mean,
// save_invstd, the running update (unbiased variance; and the batch count `batches`, when given,
// by channel 0's thread), and the affine map as scale/shift (y = x * scale + shift) for the apply
// pass.
// With `record` false only scale[ch] and shift[ch] are written (an elementwise pass's block that
// computes its own coefficients; one block records).
// Every step of the statistics is an explicitly rounded intrinsic, which the compiler never
// contracts into a fused multiply-add: the kernels that inline this (a finalize kernel, an
// elementwise pass computing its own coefficients) then give the same bits for the same sums.
__device__ __forceinline__ void write_statistics(int ch, float mean, float var, float count, ChannelParam weight,
                                                 ChannelParam bias, float eps, float momentum, float* running_mean,
                                                 float* running_var, float* save_mean, float* save_invstd,
                                                 std::int64_t* batches, float* scale, float* shift,
                                                 bool record = true) {
  const float invstd = rsqrtf(__fadd_rn(var, eps));
  if (record) {
    save_mean[ch] = mean;
    save_invstd[ch] = invstd;
    const float keep = 1.f - momentum;
    const float unbiased = count > 1.f ? __fdiv_rn(__fmul_rn(var, count), count - 1.f) : var;
    running_mean[ch] = __fadd_rn(__fmul_rn(keep, running_mean[ch]), __fmul_rn(momentum, mean));
    running_var[ch] = __fadd_rn(__fmul_rn(keep, running_var[ch]), __fmul_rn(momentum, unbiased));
    if (ch == 0 && batches != nullptr) *batches += 1;
  }
  scale[ch] = affine_scale(invstd, weight[ch]);
  shift[ch] = affine_shift(mean, scale[ch], bias[ch]);
}

// The statistics of channel ch from whole sums of x and of its squares over `count` rows.
struct StatisticsFromSums {
  const float* sum = nullptr;
  const float* sum_of_squares = nullptr;
  float count = 0.f;
  ChannelParam weight, bias;
  float eps = 0.f, momentum = 0.f;
  float *running_mean = nullptr, *running_var = nullptr, *save_mean = nullptr, *save_invstd = nullptr;
  std::int64_t* batches = nullptr;

  __device__ __forceinline__ void write(int ch, float* scale, float* shift, bool record) const {
    const float mean = __fdiv_rn(sum[ch], count);
    write_statistics(ch, mean, variance_of(__fdiv_rn(sum_of_squares[ch], count), mean), count, weight, bias, eps,
                     momentum, running_mean, running_var, save_mean, save_invstd, batches, scale, shift, record);
  }
};

// The statistics from moments_kernel's partial sums of x - x_shift and of its squares. The
// variance is the mean square less the squared mean, clamped at 0 where rounding takes it below.
__global__ void finalize_moments_kernel(const float2* partial, const float* x_shift, int groups, int c, float count,
                                        ChannelParam weight, ChannelParam bias, float eps, float momentum,
                                        float* running_mean, float* running_var, float* save_mean, float* save_invstd,
                                        std::int64_t* batches, float* scale, float* shift) {
  __shared__ float2 shared[kFinalLanes * kFinalChannels];
  float2 m;
  if (!combine_groups(partial, groups, c, shared, m)) return;
  const int ch = blockIdx.x * kFinalChannels + threadIdx.x;
  const float d = __fdiv_rn(m.x, count);
  write_statistics(ch, __fadd_rn(x_shift[ch], d), variance_of(__fdiv_rn(m.y, count), d), count, weight, bias, eps,
                   momentum, running_mean, running_var, save_mean, save_invstd, batches, scale, shift);
}

// The same outputs as finalize_moments_kernel from per-channel sums of x and of its squares over
// `count` rows (what a convolution's epilogue computed for its output).
__global__ void finalize_sums_kernel(StatisticsFromSums stats, int c, float* scale, float* shift) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch < c) stats.write(ch, scale, shift, true);
}

// Per channel, from the sums of g and of g * (x - mean) over `count` rows: gweight, gbias, and
// the coefficients of gx = k * (g - a - (x - mean) * b) in coef[0, 3c); when relu_bias is given,
// also the forward's scale and shift (coef[3c, 5c)) from which the elementwise pass recomputes
// the ReLU's mask.
// With `record` false the parameters' gradients are not written (an elementwise pass's block that
// computes its own coefficients; one block records).
__device__ __forceinline__ void write_grad_coefficients(int ch, int c, float sg, float sgx, float count,
                                                        ChannelParam weight, const float* save_mean,
                                                        const float* save_invstd, ChannelParam relu_bias,
                                                        ChannelGrad gweight, ChannelGrad gbias, float* coef,
                                                        bool record = true) {
  const float invstd = save_invstd[ch];
  if (record) {
    gweight.store(ch, sgx * invstd);
    gbias.store(ch, sg);
  }
  coef[ch] = weight[ch] * invstd;                    // k
  coef[c + ch] = sg / count;                         // a
  coef[2 * c + ch] = invstd * invstd * sgx / count;  // b
  if (relu_bias.data != nullptr) {
    const float scale = affine_scale(invstd, weight[ch]);
    coef[3 * c + ch] = scale;
    coef[4 * c + ch] = affine_shift(save_mean[ch], scale, relu_bias[ch]);
  }
}

// write_grad_coefficients from grad_sums_kernel's partial sums.
__global__ void finalize_grads_kernel(const float2* partial, int groups, int c, float count, ChannelParam weight,
                                      const float* save_mean, const float* save_invstd, ChannelParam relu_bias,
                                      ChannelGrad gweight, ChannelGrad gbias, float* coef) {
  __shared__ float2 shared[kFinalLanes * kFinalChannels];
  float2 s;
  if (!combine_groups(partial, groups, c, shared, s)) return;
  const int ch = blockIdx.x * kFinalChannels + threadIdx.x;
  write_grad_coefficients(ch, c, s.x, s.y, count, weight, save_mean, save_invstd, relu_bias, gweight, gbias, coef);
}

// write_grad_coefficients from whole sums of g and of g * (x - mean) over `count` rows (what a
// convolution's epilogue computed for its output gradient).
struct GradCoefficientsFromSums {
  const float* sum_g = nullptr;
  const float* sum_gx = nullptr;
  float count = 0.f;
  ChannelParam weight;
  const float *save_mean = nullptr, *save_invstd = nullptr;
  ChannelGrad gweight, gbias;

  __device__ __forceinline__ void write(int ch, int c, float* coef, bool record) const {
    write_grad_coefficients(ch, c, sum_g[ch], sum_gx[ch], count, weight, save_mean, save_invstd, ChannelParam{},
                            gweight, gbias, coef, record);
  }
};

__global__ void finalize_given_grads_kernel(GradCoefficientsFromSums sums, int c, float* coef) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch < c) sums.write(ch, c, coef, true);
}

// Channel counts up to which an elementwise pass after whole sums computes the per-channel
// coefficients itself, each block into shared memory (block 0 also records the statistics or the
// parameters' gradients), instead of a finalize kernel before it: one launch and one dependency
// fewer per batch norm. Each block then reads a few floats per channel from L2; beyond this count
// that would add more traffic than the launch costs.
constexpr int kCoefficientsInPassChannels = 1024;

// Runs body(p, values) over this thread's packs of a grid-stride pass (one thread per V-channel
// vector; `packs` = elements / V), where values = load(ch0) are the per-channel values of the
// pack's first channel ch0. When the grid's stride is a whole number of pixels (c divides
// blocks x threads x V: every c that is a power of two up to threads x V, every c of ResNet), a
// thread meets the same channels on every pack, so their values load once instead of once a
// pack: the loop then streams the tensors only, which is what these memory-bound passes need.
template <int V, typename Index, typename Load, typename Body>
__device__ __forceinline__ void for_each_pack(Index packs, int c, Load&& load, Body&& body) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  Index p = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x;
  const auto first_channel = [&](Index q) { return static_cast<int>((q * V) % static_cast<Index>(c)); };
  if ((static_cast<std::int64_t>(stride) * V) % c == 0) {
    if (p >= packs) return;
    const auto values = load(first_channel(p));
    for (; p < packs; p += stride) body(p, values);
  } else {
    for (; p < packs; p += stride) body(p, load(first_channel(p)));
  }
}

// The forward's per-channel scale and shift of channels ch0..ch0+V-1.
template <int V>
struct ScaleShift {
  float scale[V], shift[V];
  __device__ __forceinline__ ScaleShift(const float* scale_of, const float* shift_of, int ch0) {
    load_channels<V>(scale_of + ch0, scale);
    load_channels<V>(shift_of + ch0, shift);
  }
};

// Elementwise passes: one thread per V-channel vector, grid-stride (for_each_pack).
// With kInPass the block first computes scale and shift of every channel from `stats` into
// shared memory (2c floats) and reads them there; scale and shift are then unused.
template <typename T, int V, typename Index, bool kInPass = false>
__global__ void apply_kernel(const T* x, const T* z, bool relu, const float* scale, const float* shift, Index packs,
                             int c, T* y, StatisticsFromSums stats) {
  if constexpr (kInPass) {
    extern __shared__ float4 in_pass[];
    float* coef = reinterpret_cast<float*>(in_pass);
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x) stats.write(ch, coef, coef + c, blockIdx.x == 0);
    __syncthreads();
    scale = coef;
    shift = coef + c;
  }
  const auto load = [&](int ch0) { return ScaleShift<V>(scale, shift, ch0); };
  for_each_pack<V>(packs, c, load, [&](Index p, const ScaleShift<V>& co) {
    const Index i = p * V;
    float v[V];
    load_vec<V>(x + i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = affine(v[j], co.scale[j], co.shift[j]);
    if (z != nullptr) {
      float zv[V];
      load_vec<V>(z + i, zv);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] += zv[j];
    }
    if (relu) {
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = rectified(v[j]);
    }
    store_vec<V>(y + i, v);
  });
}

// The input gradient's per-channel coefficients of channels ch0..ch0+V-1, from coef (k, a and b
// at [0, 3c), the recomputed mask's scale and shift at [3c, 5c) when `recompute`) and the mean,
// and the input gradient gx[i..i+V) = beta*gx + k * (g - a - (x - mean) * b) they give.
template <int V>
struct InputGradCoefficients {
  float k[V], a[V], b[V], mu[V], scale[V], shift[V];

  __device__ __forceinline__ InputGradCoefficients(const float* coef, const float* mean, int c, int ch0,
                                                   bool recompute) {
    load_channels<V>(coef + ch0, k);
    load_channels<V>(coef + c + ch0, a);
    load_channels<V>(coef + 2 * c + ch0, b);
    load_channels<V>(mean + ch0, mu);
    if (recompute) {
      load_channels<V>(coef + 3 * c + ch0, scale);
      load_channels<V>(coef + 4 * c + ch0, shift);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) scale[j] = shift[j] = 0.f;  // unread; defined for the copy
    }
  }
  template <typename T, typename Index>
  __device__ __forceinline__ void store(const float (&g)[V], const float (&xv)[V], float beta, T* gx, Index i) const {
    float out[V];
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = k[j] * (g[j] - a[j] - (xv[j] - mu[j]) * b[j]);
    if (beta != 0.f) {
      float prev[V];
      load_vec<V>(gx + i, prev);
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] += beta * prev[j];
    }
    store_vec<V>(gx + i, out);
  }
};

// gx = beta*gx + k * (g - a - (x - mean) * b), g = gy masked by mask_y > 0 when mask_y is
// given, else by the pre-activation recomputed from coef[3c, 5c) when `recompute`.
// With kInPass the block first computes the three coefficients of every channel from `sums` into
// shared memory (3c floats) and reads them there; coef is then unused.
template <typename T, int V, typename Index, bool kInPass = false>
__global__ void grad_apply_kernel(const T* x, const T* mask_y, bool recompute, const T* gy, const float* mean,
                                  const float* coef, Index packs, int c, float beta, T* gx,
                                  GradCoefficientsFromSums sums) {
  if constexpr (kInPass) {
    extern __shared__ float4 in_pass[];
    float* shared_coef = reinterpret_cast<float*>(in_pass);
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x) sums.write(ch, c, shared_coef, blockIdx.x == 0);
    __syncthreads();
    coef = shared_coef;
  }
  const auto load = [&](int ch0) { return InputGradCoefficients<V>(coef, mean, c, ch0, recompute); };
  for_each_pack<V>(packs, c, load, [&](Index p, const InputGradCoefficients<V>& co) {
    const Index i = p * V;
    float g[V], xv[V];
    load_grad_and_input<V>(x, mask_y, recompute, gy, i, co.scale, co.shift, g, xv);
    co.store(g, xv, beta, gx, i);
  });
}

// The stem's forward after the statistics: y = max_pool(relu(x * scale + shift)) over each window
// of g, with each normalised value rounded to T, as batch_norm_relu's output is, before the window
// compares them: the maxima and winners are the composition's, and the normalised image, four
// times the pooled one in ResNet's stem, is never written or read back.
template <typename T, int V, typename Index>
__global__ void apply_relu_max_pool_kernel(const T* x, const float* scale, const float* shift, PoolGeometry g,
                                           Index packs, T* y, std::uint8_t* argmax) {
  for (Index p = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; p < packs;
       p += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Pixel<Index> o = pixel_of<V>(p, g.c, g.oh, g.ow);
    float sc[V], sh[V];
    load_channels<V>(scale + o.cv * V, sc);
    load_channels<V>(shift + o.cv * V, sh);
    const auto normalise = [&](float (&v)[V]) {
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = to_float(from_float<T>(rectified(affine(v[j], sc[j], sh[j]))));
    };
    float best[V];
    ArgmaxBytes<V> win;
    window_max<T, V>(x, g, o, normalise, best, win);
    store_vec<V>(y + p * V, best);
    store_argmax<V>(argmax + p * V, win);
  }
}

// The stem's backward reduction: per channel the sums of g and of g * (x - mean), where g, the
// gradient at relu(batch_norm(x)), is each pooled output's gradient at its window's winner, passed
// by the ReLU where the output (the winner's value) is positive. Summed over the pooled outputs
// (a quarter of the image's pixels in ResNet's stem), reading x only at the winners.
template <typename T, int V>
__global__ void __launch_bounds__(kReduceThreads) pool_grad_sums_kernel(const T* x, const T* y,
                                                                        const std::uint8_t* argmax, const T* gy,
                                                                        const float* mean, PoolGeometry g,
                                                                        std::int64_t rows, float2* partial) {
  extern __shared__ unsigned char smem[];
  const int c = g.c;
  const int ch0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  GradSums<V> sums(mean, c, ch0);
  if (ch0 < c) {
    const std::int64_t step = static_cast<std::int64_t>(gridDim.y) * blockDim.y;
    for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += step) {
      const Pixel<std::int64_t> o = pixel_of<V>(r * (c / V) + ch0 / V, c, g.oh, g.ow);
      const std::int64_t i = r * c + ch0;
      float gv[V], yv[V];
      load_vec<V>(gy + i, gv);
      load_vec<V>(y + i, yv);
      const ArgmaxBytes<V> win = load_argmax<V>(argmax + i);
      bool live = false;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (!(yv[j] > 0.f) || win.b[j] == kNoWinner) gv[j] = 0.f;
        live |= gv[j] != 0.f;
      }
      if (!live) continue;  // nothing passes the ReLU here: x is not read
      float xw[V];  // x at each channel's winner
#pragma unroll
      for (int j = 0; j < V; ++j) xw[j] = 0.f;
      for (int k = 0; k < g.kh * g.kw; ++k) {
        bool any = false;
#pragma unroll
        for (int j = 0; j < V; ++j) any |= win.b[j] == k && gv[j] != 0.f;
        if (!any) continue;
        float xv[V];
        load_vec<V>(x + input_offset<V>(g, o.n, o.y * g.sh - g.ph + k / g.kw, o.x * g.sw - g.pw + k % g.kw, o.cv), xv);
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (win.b[j] == k) xw[j] = xv[j];
      }
      sums.add(gv, xw);  // a channel the ReLU stopped adds zero
    }
  }
  sums.store(smem, c, ch0, partial);
}

// The stem's input gradient: gx = beta*gx + k * (g - a - (x - mean) * b) with g the pooled
// gradient gathered at this pixel (gather_window_grads) and rounded to T, as the plain pooling's
// backward stores it, then masked by the pre-activation recomputed from x (coef[3c, 5c)), as
// grad_apply_kernel masks it.
template <typename T, int V, typename Index, int W>
__global__ void pool_grad_apply_kernel(const T* x, const std::uint8_t* argmax, const T* gy, PoolGeometry g,
                                       const float* mean, const float* coef, Index packs, float beta, T* gx) {
  const int c = g.c;
  const auto load = [&](int ch0) { return InputGradCoefficients<V>(coef, mean, c, ch0, true); };
  for_each_pack<V>(packs, c, load, [&](Index p, const InputGradCoefficients<V>& co) {
    const Pixel<Index> in = pixel_of<V>(p, c, g.h, g.w);
    float gv[V], xv[V];
    gather_window_grads<T, V, Index, W>(argmax, gy, g, in.n, in.y, in.x, in.cv, gv);
    const Index i = p * V;
    load_vec<V>(x + i, xv);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      gv[j] = to_float(from_float<T>(gv[j]));
      if (!relu_passes<T>(xv[j], co.scale[j], co.shift[j])) gv[j] = 0.f;
    }
    co.store(gv, xv, beta, gx, i);
  });
}

// The reduction launch of `kernel` for rows x c with V channels per thread: threads across the
// channel vectors (at most 32), row lanes to fill 256 threads; as many row groups as fill the GPU
// in one wave of resident blocks (resident_blocks), at most one per 16 rows of a thread.
struct ReduceLaunch {
  dim3 grid, block;
  int groups;
  std::size_t shared_bytes = 0;
};

ReduceLaunch reduce_launch(const void* kernel, std::size_t partial_bytes, int device, std::int64_t rows, int c,
                           int v) {
  const int vectors = c / v;
  const int tx = std::min(vectors, 32);
  const int ty = std::max(1, kReduceThreads / tx);
  const int channel_blocks = (vectors + tx - 1) / tx;
  ReduceLaunch l;
  l.block = dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
  l.shared_bytes = static_cast<std::size_t>(tx) * ty * v * partial_bytes;
  const std::int64_t resident =
      static_cast<std::int64_t>(resident_blocks(kernel, tx * ty, l.shared_bytes, device)) * sm_count(device);
  const std::int64_t want = std::max<std::int64_t>(1, resident / channel_blocks);
  const std::int64_t most = std::max<std::int64_t>(1, rows / (static_cast<std::int64_t>(ty) * 16));
  l.groups = static_cast<int>(std::min<std::int64_t>({want, most, 65535}));
  l.grid = dim3(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(l.groups));
  return l;
}

// Blocks of kThreads for a grid-stride pass of `kernel` over `work` items: one wave of resident
// blocks, fewer when the work needs fewer.
unsigned elementwise_blocks(const void* kernel, int device, std::int64_t work, std::size_t shared_bytes) {
  const std::int64_t cap =
      static_cast<std::int64_t>(resident_blocks(kernel, kThreads, shared_bytes, device)) * sm_count(device);
  return static_cast<unsigned>(
      std::max<std::int64_t>(1, std::min<std::int64_t>((work + kThreads - 1) / kThreads, cap)));
}

// Runs an elementwise pass over the n / v packs of v values: kernel(index) is the pass's kernel
// for the Index type with_index_type picks, and launch(k, blocks, packs) launches that kernel k
// (with shared_bytes of dynamic shared memory a block); then checks the launch.
template <typename Kernel, typename Launch>
void launch_packs(int device, std::int64_t n, int v, Kernel&& kernel, Launch&& launch, std::size_t shared_bytes = 0) {
  const std::int64_t packs = n / v;
  with_index_type(n, [&](auto index) {
    using Index = decltype(index);
    const auto k = kernel(index);
    launch(k, elementwise_blocks(reinterpret_cast<const void*>(k), device, packs, shared_bytes),
           static_cast<Index>(packs));
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

// Float scratch on x's device, owned by holder: a Partial per row group of l and channel (the
// reduction's partials), then tail_floats floats per channel, whose start goes to *tail.
template <typename Partial>
Partial* reduce_scratch(const Tensor& x, const ReduceLaunch& l, int c, int tail_floats, Tensor& holder,
                        float** tail) {
  static_assert(sizeof(Partial) % sizeof(float) == 0, "partials are whole floats");
  const std::int64_t partial_floats = static_cast<std::int64_t>(sizeof(Partial) / sizeof(float)) * l.groups * c;
  holder = Tensor::empty({partial_floats + static_cast<std::int64_t>(tail_floats) * c},
                         TensorOptions(kFloat32, x.device()));
  float* work = holder.data<float>();
  *tail = work + partial_floats;
  return reinterpret_cast<Partial*>(work);
}

// The forward's elementwise pass: y = act(x * scale + shift [+ z]) over n elements of c channels;
// with `stats`, scale and shift computed in the pass from them instead.
template <typename T>
void launch_apply(CudaDevice& d, const T* xp, const T* zp, bool relu, const float* scale, const float* shift,
                  std::int64_t n, int c, T* yp, const StatisticsFromSums* stats = nullptr) {
  with_pack_width<T>(c, {xp, zp, yp}, [&](auto width) {
    constexpr int V = decltype(width)::value;
    if (stats != nullptr) {
      const std::size_t shared = 2 * static_cast<std::size_t>(c) * sizeof(float);
      const auto kernel = [](auto index) { return &apply_kernel<T, V, decltype(index), true>; };
      launch_packs(
          d.device(), n, V, kernel,
          [&](auto k, unsigned blocks, auto packs) {
            k<<<blocks, kThreads, shared, d.stream()>>>(xp, zp, relu, nullptr, nullptr, packs, c, yp, *stats);
          },
          shared);
      return;
    }
    const auto kernel = [](auto index) { return &apply_kernel<T, V, decltype(index)>; };
    launch_packs(d.device(), n, V, kernel, [&](auto k, unsigned blocks, auto packs) {
      k<<<blocks, kThreads, 0, d.stream()>>>(xp, zp, relu, scale, shift, packs, c, yp, StatisticsFromSums{});
    });
  });
}

}  // namespace

namespace {

// The batch counter's address, or null when nothing is counted (batches has no elements).
std::int64_t* counter(Tensor& batches) {
  if (batches.numel() == 0) return nullptr;
  DPL_CHECK(batches.dtype() == kInt64 && batches.numel() == 1, "batch_norm: expected a batch counter of one int64 ",
            "element, got ", batches.dtype(), " of shape ", shape_str(batches.shape()));
  return batches.data<std::int64_t>();
}

// The statistics of channels-last x from sums[0] and sums[1] (its per-channel sums and sums of
// squares), with what write_statistics records and updates.
StatisticsFromSums statistics_from_sums(const Tensor* sums, std::int64_t rows, const Tensor& weight,
                                        const Tensor& bias, float eps, float momentum, Tensor& running_mean,
                                        Tensor& running_var, Tensor& batches, Tensor& save_mean,
                                        Tensor& save_invstd) {
  StatisticsFromSums stats;
  stats.sum = sums[0].data<float>();
  stats.sum_of_squares = sums[1].data<float>();
  stats.count = static_cast<float>(rows);
  stats.weight = channel_param(weight);
  stats.bias = channel_param(bias);
  stats.eps = eps;
  stats.momentum = momentum;
  stats.running_mean = running_mean.data<float>();
  stats.running_var = running_var.data<float>();
  stats.save_mean = save_mean.data<float>();
  stats.save_invstd = save_invstd.data<float>();
  stats.batches = counter(batches);
  return stats;
}

// The batch statistics of x (T elements, channels-last), from sums[0] and sums[1] when sums is
// given, else from a moments pass over x, recorded in save_mean and save_invstd and the running
// statistics (and the batch count); returns the affine map's scale, c floats of scratch that
// holder owns, with its shift in the c floats after.
template <typename T>
float* statistics_and_affine(CudaDevice& d, const Tensor& x, const Tensor* sums, const Tensor& weight,
                             const Tensor& bias, float eps, float momentum, Tensor& running_mean, Tensor& running_var,
                             Tensor& batches, Tensor& save_mean, Tensor& save_invstd, Tensor& holder) {
  const int c = static_cast<int>(x.size(1));
  const std::int64_t rows = x.numel() / c;
  float* scale = nullptr;
  if (sums != nullptr) {
    const StatisticsFromSums stats = statistics_from_sums(sums, rows, weight, bias, eps, momentum, running_mean,
                                                          running_var, batches, save_mean, save_invstd);
    holder = Tensor::empty({2 * static_cast<std::int64_t>(c)}, TensorOptions(kFloat32, x.device()));
    scale = holder.data<float>();
    constexpr int kChannelsPerBlock = 128;
    finalize_sums_kernel<<<(c + kChannelsPerBlock - 1) / kChannelsPerBlock, kChannelsPerBlock, 0, d.stream()>>>(
        stats, c, scale, scale + c);
    DPL_CUDA_CHECK(cudaGetLastError());
    return scale;
  }
  const T* xp = in_ptr<T>(x);
  with_pack_width<T>(c, {xp}, [&](auto width) {
    constexpr int V = decltype(width)::value;
    const ReduceLaunch l = reduce_launch(reinterpret_cast<const void*>(&moments_kernel<T, V>), sizeof(float2),
                                         d.device(), rows, c, V);
    // Scratch: the partial sums, then scale, shift and the sums' shift of x.
    float2* partial = reduce_scratch<float2>(x, l, c, 3, holder, &scale);
    float* x_shift = scale + 2 * c;
    moments_kernel<T, V><<<l.grid, l.block, l.shared_bytes, d.stream()>>>(xp, rows, c, partial, x_shift);
    DPL_CUDA_CHECK(cudaGetLastError());
    finalize_moments_kernel<<<(c + kFinalChannels - 1) / kFinalChannels, dim3(kFinalChannels, kFinalLanes), 0,
                              d.stream()>>>(partial, x_shift, l.groups, c, static_cast<float>(rows),
                                            channel_param(weight), channel_param(bias), eps, momentum,
                                            running_mean.data<float>(), running_var.data<float>(),
                                            save_mean.data<float>(), save_invstd.data<float>(), counter(batches),
                                            scale, scale + c);
    DPL_CUDA_CHECK(cudaGetLastError());
  });
  return scale;
}

// batch_norm_nhwc_train, with the statistics from sums[0] and sums[1] when sums is given
// (batch_norm_nhwc_train_from_sums), else from a moments pass over x.
void train(const Tensor& x, const Tensor* z, bool relu, const Tensor* sums, const Tensor& weight, const Tensor& bias,
           float eps, float momentum, Tensor& running_mean, Tensor& running_var, Tensor& batches, Tensor& y,
           Tensor& save_mean, Tensor& save_invstd) {
  on_device_typed(x, "batch_norm (channels-last)", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const int c = static_cast<int>(x.size(1));
    const std::int64_t n = x.numel();
    const T* xp = in_ptr<T>(x);
    const T* zp = z != nullptr ? in_ptr<T>(*z) : nullptr;
    T* yp = out_ptr<T>(y);
    if (sums != nullptr && c <= kCoefficientsInPassChannels) {
      const StatisticsFromSums stats = statistics_from_sums(sums, n / c, weight, bias, eps, momentum, running_mean,
                                                            running_var, batches, save_mean, save_invstd);
      launch_apply(d, xp, zp, relu, nullptr, nullptr, n, c, yp, &stats);
      return;
    }
    Tensor holder;
    const float* scale = statistics_and_affine<T>(d, x, sums, weight, bias, eps, momentum, running_mean, running_var,
                                                  batches, save_mean, save_invstd, holder);
    launch_apply(d, xp, zp, relu, scale, scale + c, n, c, yp);
  });
}

}  // namespace

void batch_norm_nhwc_train(const Tensor& x, const Tensor* z, bool relu, const Tensor& weight, const Tensor& bias,
                           float eps, float momentum, Tensor& running_mean, Tensor& running_var, Tensor& batches,
                           Tensor& y, Tensor& save_mean, Tensor& save_invstd) {
  train(x, z, relu, nullptr, weight, bias, eps, momentum, running_mean, running_var, batches, y, save_mean,
        save_invstd);
}

void batch_norm_nhwc_train_from_sums(const Tensor& x, const Tensor* z, bool relu, const Tensor& sum,
                                     const Tensor& sum_of_squares, const Tensor& weight, const Tensor& bias, float eps,
                                     float momentum, Tensor& running_mean, Tensor& running_var, Tensor& batches,
                                     Tensor& y, Tensor& save_mean, Tensor& save_invstd) {
  const Tensor sums[2] = {sum, sum_of_squares};
  train(x, z, relu, sums, weight, bias, eps, momentum, running_mean, running_var, batches, y, save_mean,
        save_invstd);
}

void batch_norm_nhwc_backward(const Tensor& x, const Tensor* y, const Tensor* relu_bias, const Tensor& gy,
                              const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd, float beta,
                              Tensor& gx, Tensor* gz, float param_beta, Tensor& gweight, Tensor& gbias) {
  on_device_typed(x, "batch_norm backward (channels-last)", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const int c = static_cast<int>(x.size(1));
    const std::int64_t n = x.numel(), rows = n / c;
    const T* xp = in_ptr<T>(x);
    const T* yp = y != nullptr ? in_ptr<T>(*y) : nullptr;
    const T* gyp = in_ptr<T>(gy);
    T* gxp = out_ptr<T>(gx);
    T* gzp = gz != nullptr ? out_ptr<T>(*gz) : nullptr;
    with_pack_width<T>(c, {xp, yp, gyp, gxp, gzp}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      const ReduceLaunch l = reduce_launch(reinterpret_cast<const void*>(&grad_sums_kernel<T, V>), sizeof(float2),
                                           d.device(), rows, c, V);
      // Scratch: the partial sums, then gx's three coefficients and the mask's scale and shift.
      Tensor holder;
      float* coef = nullptr;
      float2* partial = reduce_scratch<float2>(x, l, c, 5, holder, &coef);
      ReluMask<T> mask;
      mask.y = yp;
      if (yp == nullptr && relu_bias != nullptr) {
        mask.weight = channel_param(weight);
        mask.bias = channel_param(*relu_bias);
        mask.invstd = save_invstd.data<float>();
      }
      grad_sums_kernel<T, V><<<l.grid, l.block, l.shared_bytes, d.stream()>>>(
          xp, mask, gyp, save_mean.data<float>(), rows, c, partial, gzp);
      DPL_CUDA_CHECK(cudaGetLastError());
      finalize_grads_kernel<<<(c + kFinalChannels - 1) / kFinalChannels, dim3(kFinalChannels, kFinalLanes), 0,
                              d.stream()>>>(partial, l.groups, c, static_cast<float>(rows), channel_param(weight),
                                            save_mean.data<float>(), save_invstd.data<float>(), mask.bias,
                                            channel_grad(gweight, param_beta), channel_grad(gbias, param_beta), coef);
      DPL_CUDA_CHECK(cudaGetLastError());
      const auto kernel = [](auto index) { return &grad_apply_kernel<T, V, decltype(index)>; };
      launch_packs(d.device(), n, V, kernel, [&](auto k, unsigned blocks, auto packs) {
        // With a residual, grad_sums stored the masked g in gz: read it back instead of gy and y.
        const bool from_gz = gzp != nullptr;
        k<<<blocks, kThreads, 0, d.stream()>>>(
            xp, from_gz ? nullptr : yp, !from_gz && mask.bias.data != nullptr, from_gz ? gzp : gyp, save_mean.data<float>(),
            coef, packs, c, beta, gxp, GradCoefficientsFromSums{});
      });
    });
  });
}

void batch_norm_nhwc_backward_from_sums(const Tensor& x, const Tensor& g, const Tensor& sum_g, const Tensor& sum_gx,
                                        const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                        float beta, Tensor& gx, float param_beta, Tensor& gweight, Tensor& gbias) {
  on_device_typed(x, "batch_norm backward from sums (channels-last)", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const int c = static_cast<int>(x.size(1));
    const std::int64_t n = x.numel(), rows = n / c;
    const T* xp = in_ptr<T>(x);
    const T* gp = in_ptr<T>(g);
    T* gxp = out_ptr<T>(gx);
    GradCoefficientsFromSums sums;
    sums.sum_g = sum_g.data<float>();
    sums.sum_gx = sum_gx.data<float>();
    sums.count = static_cast<float>(rows);
    sums.weight = channel_param(weight);
    sums.save_mean = save_mean.data<float>();
    sums.save_invstd = save_invstd.data<float>();
    sums.gweight = channel_grad(gweight, param_beta);
    sums.gbias = channel_grad(gbias, param_beta);
    const bool in_pass = c <= kCoefficientsInPassChannels;
    Tensor coef_holder;
    float* coef = nullptr;
    if (!in_pass) {
      coef_holder = Tensor::empty({3 * static_cast<std::int64_t>(c)}, TensorOptions(kFloat32, x.device()));
      coef = coef_holder.data<float>();
      finalize_given_grads_kernel<<<(c + 255) / 256, 256, 0, d.stream()>>>(sums, c, coef);
      DPL_CUDA_CHECK(cudaGetLastError());
    }
    with_pack_width<T>(c, {xp, gp, gxp}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      // g comes masked: no mask to apply again.
      if (in_pass) {
        const std::size_t shared = 3 * static_cast<std::size_t>(c) * sizeof(float);
        const auto kernel = [](auto index) { return &grad_apply_kernel<T, V, decltype(index), true>; };
        launch_packs(
            d.device(), n, V, kernel,
            [&](auto k, unsigned blocks, auto packs) {
              k<<<blocks, kThreads, shared, d.stream()>>>(xp, nullptr, false, gp, save_mean.data<float>(), nullptr,
                                                          packs, c, beta, gxp, sums);
            },
            shared);
        return;
      }
      const auto kernel = [](auto index) { return &grad_apply_kernel<T, V, decltype(index)>; };
      launch_packs(d.device(), n, V, kernel, [&](auto k, unsigned blocks, auto packs) {
        k<<<blocks, kThreads, 0, d.stream()>>>(xp, nullptr, false, gp, save_mean.data<float>(), coef, packs, c, beta,
                                               gxp, GradCoefficientsFromSums{});
      });
    });
  });
}

void batch_norm_relu_max_pool_nhwc_train(const Pool2dParams& p, const Tensor& x, const Tensor* sums,
                                         const Tensor& weight, const Tensor& bias, float eps, float momentum,
                                         Tensor& running_mean, Tensor& running_var, Tensor& batches, Tensor& y,
                                         Tensor& argmax, Tensor& save_mean, Tensor& save_invstd) {
  on_device_typed(x, "batch_norm_relu_max_pool (channels-last)", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const PoolGeometry g = pool_geometry(p, x.shape(), y.shape());
    Tensor holder;
    const float* scale = statistics_and_affine<T>(d, x, sums, weight, bias, eps, momentum, running_mean, running_var,
                                                  batches, save_mean, save_invstd, holder);
    const T* xp = in_ptr<T>(x);
    T* yp = out_ptr<T>(y);
    auto* ap = static_cast<std::uint8_t*>(argmax.raw_data());
    with_pack_width<T>(g.c, {xp, yp, ap}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      const std::int64_t packs = y.numel() / V;  // the pooled output's; offsets reach into x too
      with_index_type(std::max(x.numel(), y.numel()), [&](auto index) {
        using Index = decltype(index);
        const auto k = &apply_relu_max_pool_kernel<T, V, Index>;
        k<<<elementwise_blocks(reinterpret_cast<const void*>(k), d.device(), packs, 0), kThreads, 0, d.stream()>>>(
            xp, scale, scale + g.c, g, static_cast<Index>(packs), yp, ap);
      });
      DPL_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void batch_norm_relu_max_pool_nhwc_backward(const Pool2dParams& p, const Tensor& x, const Tensor& y,
                                            const Tensor& argmax, const Tensor& gy, const Tensor& weight,
                                            const Tensor& bias, const Tensor& save_mean, const Tensor& save_invstd,
                                            float beta, Tensor& gx, float param_beta, Tensor& gweight,
                                            Tensor& gbias) {
  on_device_typed(x, "batch_norm_relu_max_pool backward (channels-last)", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const PoolGeometry g = pool_geometry(p, x.shape(), y.shape());
    const int c = g.c;
    const std::int64_t pooled_rows = y.numel() / c;
    const T* xp = in_ptr<T>(x);
    const T* yp = in_ptr<T>(y);
    const T* gyp = in_ptr<T>(gy);
    const auto* ap = static_cast<const std::uint8_t*>(argmax.raw_data());
    T* gxp = out_ptr<T>(gx);
    with_pack_width<T>(c, {xp, yp, gyp, gxp, ap}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      const ReduceLaunch l = reduce_launch(reinterpret_cast<const void*>(&pool_grad_sums_kernel<T, V>),
                                           sizeof(float2), d.device(), pooled_rows, c, V);
      // Scratch: the partial sums, then gx's three coefficients and the mask's scale and shift.
      Tensor holder;
      float* coef = nullptr;
      float2* partial = reduce_scratch<float2>(x, l, c, 5, holder, &coef);
      pool_grad_sums_kernel<T, V><<<l.grid, l.block, l.shared_bytes, d.stream()>>>(
          xp, yp, ap, gyp, save_mean.data<float>(), g, pooled_rows, partial);
      DPL_CUDA_CHECK(cudaGetLastError());
      // The batch norm's count is the image's rows, not the pooled ones.
      finalize_grads_kernel<<<(c + kFinalChannels - 1) / kFinalChannels, dim3(kFinalChannels, kFinalLanes), 0,
                              d.stream()>>>(partial, l.groups, c, static_cast<float>(x.numel() / c),
                                            channel_param(weight), save_mean.data<float>(),
                                            save_invstd.data<float>(), channel_param(bias),
                                            channel_grad(gweight, param_beta), channel_grad(gbias, param_beta), coef);
      DPL_CUDA_CHECK(cudaGetLastError());
      const std::int64_t packs = x.numel() / V;
      with_index_type(std::max(x.numel(), y.numel()), [&](auto index) {
        using Index = decltype(index);
        const auto launch = [&](auto k) {
          k<<<elementwise_blocks(reinterpret_cast<const void*>(k), d.device(), packs, 0), kThreads, 0,
              d.stream()>>>(xp, ap, gyp, g, save_mean.data<float>(), coef, static_cast<Index>(packs), beta, gxp);
        };
        if (at_most_two_windows_a_pixel(g))
          launch(&pool_grad_apply_kernel<T, V, Index, 2>);
        else
          launch(&pool_grad_apply_kernel<T, V, Index, 0>);
      });
      DPL_CUDA_CHECK(cudaGetLastError());
    });
  });
}

}  // namespace dpl::backend::cuda_detail
