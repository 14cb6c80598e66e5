// Optimizer updates: each is one kernel launch over the whole parameter arena, reading and
// writing every state array once. Arenas are 64-byte aligned with lengths that are multiples of
// 16 floats, so they always take the 16-byte vector path.
#include <cfloat>

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

// The arithmetic follows the CPU backend term by term, so the two agree to rounding. A step
// recorded in a CUDA graph reads its values from `dh` and skips while `skip` is raised (see
// UpdateSource); otherwise those are null and `h` comes by value.

template <int V>
__global__ void sgd_kernel(float* p, const float* g, std::int64_t n, SgdHyper h, const SgdHyper* dh,
                           const float* skip) {
  if (skip != nullptr && *skip != 0.f) return;
  if (dh != nullptr) h = *dh;
  for (std::int64_t k = global_thread(), nv = n / V; k < nv; k += grid_threads()) {
    const std::int64_t i = k * V;
    Vec<V> pv = load<V>(p + i);
    const Vec<V> gv = load<V>(g + i);
#pragma unroll
    for (int j = 0; j < V; ++j) pv.v[j] -= h.lr * (gv.v[j] + h.weight_decay * pv.v[j]);
    store<V>(p + i, pv);
  }
}

template <int V>
__global__ void momentum_kernel(float* p, const float* g, float* vel, std::int64_t n, MomentumHyper h,
                                const MomentumHyper* dh, const float* skip) {
  if (skip != nullptr && *skip != 0.f) return;
  if (dh != nullptr) h = *dh;
  for (std::int64_t k = global_thread(), nv = n / V; k < nv; k += grid_threads()) {
    const std::int64_t i = k * V;
    Vec<V> pv = load<V>(p + i);
    Vec<V> vv = load<V>(vel + i);
    const Vec<V> gv = load<V>(g + i);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      vv.v[j] = h.momentum * vv.v[j] - h.lr * (gv.v[j] + h.weight_decay * pv.v[j]);
      pv.v[j] += vv.v[j];
    }
    store<V>(vel + i, vv);
    store<V>(p + i, pv);
  }
}

template <int V>
__global__ void adam_kernel(float* p, const float* g, float* m, float* v, std::int64_t n, AdamHyper h,
                            const AdamHyper* dh, const float* skip) {
  if (skip != nullptr && *skip != 0.f) return;
  if (dh != nullptr) h = *dh;
  const float one_minus_b1 = 1.f - h.beta1, one_minus_b2 = 1.f - h.beta2;
  for (std::int64_t k = global_thread(), nv = n / V; k < nv; k += grid_threads()) {
    const std::int64_t i = k * V;
    Vec<V> pv = load<V>(p + i);
    Vec<V> mv = load<V>(m + i);
    Vec<V> vv = load<V>(v + i);
    const Vec<V> gv = load<V>(g + i);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float gi = gv.v[j] + h.weight_decay * pv.v[j];
      mv.v[j] += one_minus_b1 * (gi - mv.v[j]);
      vv.v[j] += one_minus_b2 * (gi * gi - vv.v[j]);
      pv.v[j] -= h.lr_t * mv.v[j] / (sqrtf(vv.v[j]) + h.eps);
    }
    store<V>(m + i, mv);
    store<V>(v + i, vv);
    store<V>(p + i, pv);
  }
}

// The square root of the new kernels keeps its input normal, as the CPU backend's does (whose
// fast reciprocal square root needs it), so the two agree; RMSprop's centered variance, which
// rounding can push a hair below zero, is clamped by it too.
__device__ __forceinline__ float root(float x) { return sqrtf(fmaxf(x, FLT_MIN)); }

template <int V>
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, std::int64_t n, AdamWHyper h,
                             const AdamWHyper* dh, const float* skip) {
  if (skip != nullptr && *skip != 0.f) return;
  if (dh != nullptr) h = *dh;
  const float decay = 1.f - h.lr * h.weight_decay, one_minus_b1 = 1.f - h.beta1, one_minus_b2 = 1.f - h.beta2;
  for (std::int64_t k = global_thread(), nv = n / V; k < nv; k += grid_threads()) {
    const std::int64_t i = k * V;
    Vec<V> pv = load<V>(p + i);
    Vec<V> mv = load<V>(m + i);
    Vec<V> vv = load<V>(v + i);
    const Vec<V> gv = load<V>(g + i);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float pi = pv.v[j] * decay;
      mv.v[j] = mv.v[j] * h.beta1 + one_minus_b1 * gv.v[j];
      vv.v[j] = vv.v[j] * h.beta2 + one_minus_b2 * gv.v[j] * gv.v[j];
      pv.v[j] = pi - h.step_size * mv.v[j] / (root(vv.v[j]) / h.bias_correction2_sqrt + h.eps);
    }
    store<V>(m + i, mv);
    store<V>(v + i, vv);
    store<V>(p + i, pv);
  }
}

// momentum and centered are fixed for a launch, so every thread takes the same branches.
__global__ void rmsprop_kernel(float* p, const float* g, float* sq, float* buf, float* ga, std::int64_t n,
                               RmspropHyper h, const RmspropHyper* dh, const float* skip) {
  if (skip != nullptr && *skip != 0.f) return;
  if (dh != nullptr) h = *dh;
  const bool momentum = h.momentum > 0.f, centered = h.centered != 0.f;
  const float one_minus_alpha = 1.f - h.alpha;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float pi = p[i];
    const float gi = g[i] + h.weight_decay * pi;
    const float s = sq[i] * h.alpha + one_minus_alpha * gi * gi;
    sq[i] = s;
    float avg;
    if (centered) {
      const float a = ga[i] * h.alpha + one_minus_alpha * gi;
      ga[i] = a;
      avg = root(s - a * a) + h.eps;
    } else {
      avg = root(s) + h.eps;
    }
    if (momentum) {
      const float b = buf[i] * h.momentum + gi / avg;
      buf[i] = b;
      p[i] = pi - h.lr * b;
    } else {
      p[i] = pi - h.lr * gi / avg;
    }
  }
}

template <int V>
__global__ void adagrad_kernel(float* p, const float* g, float* sum, std::int64_t n, AdagradHyper h,
                               const AdagradHyper* dh, const float* skip) {
  if (skip != nullptr && *skip != 0.f) return;
  if (dh != nullptr) h = *dh;
  for (std::int64_t k = global_thread(), nv = n / V; k < nv; k += grid_threads()) {
    const std::int64_t i = k * V;
    Vec<V> pv = load<V>(p + i);
    Vec<V> sv = load<V>(sum + i);
    const Vec<V> gv = load<V>(g + i);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float gi = gv.v[j] + h.weight_decay * pv.v[j];
      sv.v[j] += gi * gi;
      pv.v[j] -= h.clr * gi / (root(sv.v[j]) + h.eps);
    }
    store<V>(sum + i, sv);
    store<V>(p + i, pv);
  }
}

// --- per-segment kernels: one block per chunk row of the table (kernels.hpp) ----------------------

struct Chunk {
  std::int64_t begin, length;
  int first, count, flags;
};
__device__ __forceinline__ Chunk chunk_at(const std::int32_t* table) {
  const std::int32_t* r = table + static_cast<std::int64_t>(blockIdx.x) * kSegmentTableColumns;
  return {static_cast<std::int64_t>(r[0]) * 16, r[1], r[3], r[4], r[5]};
}
// Stores the block's two sums as this chunk's partials (thread 0 holds the block totals).
__device__ __forceinline__ void store_partials(float a, float b, float* partials) {
  const double ta = block_sum(a);
  const double tb = block_sum(b);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = static_cast<float>(ta);
    partials[2 * blockIdx.x + 1] = static_cast<float>(tb);
  }
}
// The segment's two norms from its chunks' partials, in every thread of the block. Every block
// of a segment sums the same partials in the same order, so they agree on the norms.
__device__ __forceinline__ float2 segment_norms_of(const float* partials, const Chunk& c) {
  __shared__ float2 norms;
  double a = 0.0, b = 0.0;
  for (int k = c.first + static_cast<int>(threadIdx.x); k < c.first + c.count; k += blockDim.x) {
    a += partials[2 * k];
    b += partials[2 * k + 1];
  }
  a = block_sum(a);
  b = block_sum(b);
  if (threadIdx.x == 0) norms = make_float2(static_cast<float>(sqrt(a)), static_cast<float>(sqrt(b)));
  __syncthreads();
  return norms;
}

__device__ __forceinline__ float lamb_direction(float m, float v, float p, const LambHyper& h) {
  return (m / h.bias_correction1) / (root(v / h.bias_correction2) + h.eps) + h.weight_decay * p;
}

__global__ void lamb_moments_kernel(const float* p, const float* g, float* m, float* v, const std::int32_t* table,
                                    float* partials, LambHyper h, const LambHyper* dh, const float* skip) {
  if (skip != nullptr && *skip != 0.f) return;
  if (dh != nullptr) h = *dh;
  const Chunk c = chunk_at(table);
  const float one_minus_b1 = 1.f - h.beta1, one_minus_b2 = 1.f - h.beta2;
  float ww = 0.f, uu = 0.f;
  for (std::int64_t i = c.begin + threadIdx.x; i < c.begin + c.length; i += blockDim.x) {
    const float gi = g[i], pi = p[i];
    const float mi = m[i] + one_minus_b1 * (gi - m[i]);
    const float vi = v[i] + one_minus_b2 * (gi * gi - v[i]);
    m[i] = mi;
    v[i] = vi;
    const float u = lamb_direction(mi, vi, pi, h);
    ww += pi * pi;
    uu += u * u;
  }
  store_partials(ww, uu, partials);
}

__global__ void lamb_apply_kernel(float* p, const float* m, const float* v, const std::int32_t* table,
                                  const float* partials, LambHyper h, const LambHyper* dh, const float* skip) {
  if (skip != nullptr && *skip != 0.f) return;
  if (dh != nullptr) h = *dh;
  const Chunk c = chunk_at(table);
  const float2 norms = segment_norms_of(partials, c);
  const float trust = norms.x > 0.f && norms.y > 0.f ? norms.x / norms.y : 1.f;
  const float scale = h.lr * trust;
  for (std::int64_t i = c.begin + threadIdx.x; i < c.begin + c.length; i += blockDim.x)
    p[i] -= scale * lamb_direction(m[i], v[i], p[i], h);
}

__global__ void segment_norms_kernel(const float* p, const float* g, const std::int32_t* table, float* partials) {
  const Chunk c = chunk_at(table);
  float ww = 0.f, gg = 0.f;
  for (std::int64_t i = c.begin + threadIdx.x; i < c.begin + c.length; i += blockDim.x) {
    ww += p[i] * p[i];
    gg += g[i] * g[i];
  }
  store_partials(ww, gg, partials);
}

__global__ void lars_kernel(float* p, const float* g, float* vel, const std::int32_t* table, const float* partials,
                            LarsHyper h, const LarsHyper* dh, const float* skip) {
  if (skip != nullptr && *skip != 0.f) return;
  if (dh != nullptr) h = *dh;
  const Chunk c = chunk_at(table);
  const bool excluded = (c.flags & kSegmentExcluded) != 0;
  // Every thread of the block takes part in the sums, excluded or not.
  const float2 norms = segment_norms_of(partials, c);
  const float wd = excluded ? 0.f : h.weight_decay;
  float local = 1.f;
  if (!excluded && norms.x > 0.f && norms.y > 0.f)
    local = h.trust_coefficient * norms.x / (norms.y + h.weight_decay * norms.x);
  const float scale = h.lr * local;
  for (std::int64_t i = c.begin + threadIdx.x; i < c.begin + c.length; i += blockDim.x) {
    const float vi = h.momentum * vel[i] + scale * (g[i] + wd * p[i]);
    vel[i] = vi;
    p[i] -= vi;
  }
}

// ============================================================================================
// launchers
// ============================================================================================

// The device pointers of an UpdateSource: the values as Hyper, and the flag.
template <typename Hyper>
const Hyper* device_hyper(const UpdateSource& source) {
  if (source.hyper == nullptr) return nullptr;
  DPL_CHECK(source.hyper->numel() * static_cast<std::int64_t>(sizeof(float)) ==
                static_cast<std::int64_t>(sizeof(Hyper)),
            "optimizer update: expected ", sizeof(Hyper) / sizeof(float), " step values, got ", source.hyper->numel());
  return reinterpret_cast<const Hyper*>(source.hyper->data<float>());
}
const float* skip_flag(const UpdateSource& source) {
  return source.skip == nullptr ? nullptr : source.skip->data<float>();
}

void launch_sgd(float* p, const float* g, std::int64_t n, const SgdHyper& h, const UpdateSource& source, int device,
                cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = n % 4 == 0 && aligned16(p) && aligned16(g);
  const unsigned grid = grid_for(vec ? n / 4 : n, kThreads, device);
  const SgdHyper* dh = device_hyper<SgdHyper>(source);
  if (vec) sgd_kernel<4><<<grid, kThreads, 0, stream>>>(p, g, n, h, dh, skip_flag(source));
  else sgd_kernel<1><<<grid, kThreads, 0, stream>>>(p, g, n, h, dh, skip_flag(source));
  DPL_CUDA_CHECK(cudaGetLastError());
}

void launch_momentum(float* p, const float* g, float* vel, std::int64_t n, const MomentumHyper& h,
                     const UpdateSource& source, int device, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = n % 4 == 0 && aligned16(p) && aligned16(g) && aligned16(vel);
  const unsigned grid = grid_for(vec ? n / 4 : n, kThreads, device);
  const MomentumHyper* dh = device_hyper<MomentumHyper>(source);
  if (vec) momentum_kernel<4><<<grid, kThreads, 0, stream>>>(p, g, vel, n, h, dh, skip_flag(source));
  else momentum_kernel<1><<<grid, kThreads, 0, stream>>>(p, g, vel, n, h, dh, skip_flag(source));
  DPL_CUDA_CHECK(cudaGetLastError());
}

void launch_adam(float* p, const float* g, float* m, float* v, std::int64_t n, const AdamHyper& h,
                 const UpdateSource& source, int device, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = n % 4 == 0 && aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v);
  const unsigned grid = grid_for(vec ? n / 4 : n, kThreads, device);
  const AdamHyper* dh = device_hyper<AdamHyper>(source);
  if (vec) adam_kernel<4><<<grid, kThreads, 0, stream>>>(p, g, m, v, n, h, dh, skip_flag(source));
  else adam_kernel<1><<<grid, kThreads, 0, stream>>>(p, g, m, v, n, h, dh, skip_flag(source));
  DPL_CUDA_CHECK(cudaGetLastError());
}

void launch_adamw(float* p, const float* g, float* m, float* v, std::int64_t n, const AdamWHyper& h,
                  const UpdateSource& source, int device, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = n % 4 == 0 && aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v);
  const unsigned grid = grid_for(vec ? n / 4 : n, kThreads, device);
  const AdamWHyper* dh = device_hyper<AdamWHyper>(source);
  if (vec) adamw_kernel<4><<<grid, kThreads, 0, stream>>>(p, g, m, v, n, h, dh, skip_flag(source));
  else adamw_kernel<1><<<grid, kThreads, 0, stream>>>(p, g, m, v, n, h, dh, skip_flag(source));
  DPL_CUDA_CHECK(cudaGetLastError());
}

void launch_rmsprop(float* p, const float* g, float* sq, float* buf, float* ga, std::int64_t n,
                    const RmspropHyper& h, const UpdateSource& source, int device, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads, device);
  rmsprop_kernel<<<grid, kThreads, 0, stream>>>(p, g, sq, buf, ga, n, h, device_hyper<RmspropHyper>(source),
                                                skip_flag(source));
  DPL_CUDA_CHECK(cudaGetLastError());
}

void launch_adagrad(float* p, const float* g, float* sum, std::int64_t n, const AdagradHyper& h,
                    const UpdateSource& source, int device, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = n % 4 == 0 && aligned16(p) && aligned16(g) && aligned16(sum);
  const unsigned grid = grid_for(vec ? n / 4 : n, kThreads, device);
  const AdagradHyper* dh = device_hyper<AdagradHyper>(source);
  if (vec) adagrad_kernel<4><<<grid, kThreads, 0, stream>>>(p, g, sum, n, h, dh, skip_flag(source));
  else adagrad_kernel<1><<<grid, kThreads, 0, stream>>>(p, g, sum, n, h, dh, skip_flag(source));
  DPL_CUDA_CHECK(cudaGetLastError());
}

// The number of chunk rows (one block each), after checking the table against the partials.
unsigned chunk_blocks(const Tensor& segments, const Tensor& partials) {
  const std::int64_t chunks = segments.numel() / kSegmentTableColumns;
  DPL_CHECK(segments.numel() == chunks * kSegmentTableColumns && partials.numel() == 2 * chunks,
            "segment kernels: expected a table of ", kSegmentTableColumns, " columns and two partial sums per row, got ",
            segments.numel(), " table entries and ", partials.numel(), " partial sums");
  return static_cast<unsigned>(chunks);
}

}  // namespace
}  // namespace cuda_detail

// ============================================================================================
// kernel implementations
// ============================================================================================

namespace {

using cuda_detail::DeviceGuard;

void sgd_update_cuda(Tensor& param, const Tensor& grad, const SgdHyper& h, const UpdateSource& source) {
  CudaDevice& d = cuda_device_of(param);
  DeviceGuard guard(d.device());
  cuda_detail::launch_sgd(param.data<float>(), grad.data<float>(), param.numel(), h, source, d.device(), d.stream());
}

void momentum_update_cuda(Tensor& param, const Tensor& grad, Tensor& velocity, const MomentumHyper& h,
                          const UpdateSource& source) {
  CudaDevice& d = cuda_device_of(param);
  DeviceGuard guard(d.device());
  cuda_detail::launch_momentum(param.data<float>(), grad.data<float>(), velocity.data<float>(), param.numel(), h,
                               source, d.device(), d.stream());
}

void adam_update_cuda(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                      const UpdateSource& source) {
  CudaDevice& d = cuda_device_of(param);
  DeviceGuard guard(d.device());
  cuda_detail::launch_adam(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(), param.numel(),
                           h, source, d.device(), d.stream());
}

void adamw_update_cuda(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h,
                       const UpdateSource& source) {
  CudaDevice& d = cuda_device_of(param);
  DeviceGuard guard(d.device());
  cuda_detail::launch_adamw(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(), param.numel(),
                            h, source, d.device(), d.stream());
}

void rmsprop_update_cuda(Tensor& param, const Tensor& grad, Tensor& square_avg, Tensor& buf, Tensor& grad_avg,
                         const RmspropHyper& h, const UpdateSource& source) {
  // A recorded step's device values equal the ones passed here (Optimizer::replay_values()).
  const bool momentum = h.momentum > 0.f, centered = h.centered != 0.f;
  DPL_CHECK((!momentum || buf.numel() == param.numel()) && (!centered || grad_avg.numel() == param.numel()),
            "rmsprop_update: the momentum buffer and the gradient average must have the parameters' ",
            param.numel(), " elements when they are used");
  CudaDevice& d = cuda_device_of(param);
  DeviceGuard guard(d.device());
  cuda_detail::launch_rmsprop(param.data<float>(), grad.data<float>(), square_avg.data<float>(),
                              buf.numel() > 0 ? buf.data<float>() : nullptr,
                              grad_avg.numel() > 0 ? grad_avg.data<float>() : nullptr, param.numel(), h, source,
                              d.device(), d.stream());
}

void adagrad_update_cuda(Tensor& param, const Tensor& grad, Tensor& sum, const AdagradHyper& h,
                         const UpdateSource& source) {
  CudaDevice& d = cuda_device_of(param);
  DeviceGuard guard(d.device());
  cuda_detail::launch_adagrad(param.data<float>(), grad.data<float>(), sum.data<float>(), param.numel(), h, source,
                              d.device(), d.stream());
}

void lamb_moments_cuda(const Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& segments,
                       Tensor& partials, const LambHyper& h, const UpdateSource& source) {
  const unsigned blocks = cuda_detail::chunk_blocks(segments, partials);
  if (blocks == 0) return;
  CudaDevice& d = cuda_device_of(param);
  DeviceGuard guard(d.device());
  cuda_detail::lamb_moments_kernel<<<blocks, cuda_detail::kThreads, 0, d.stream()>>>(
      param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(), segments.data<std::int32_t>(),
      partials.data<float>(), h, cuda_detail::device_hyper<LambHyper>(source), cuda_detail::skip_flag(source));
  DPL_CUDA_CHECK(cudaGetLastError());
}

void lamb_apply_cuda(Tensor& param, const Tensor& m, const Tensor& v, const Tensor& segments, const Tensor& partials,
                     const LambHyper& h, const UpdateSource& source) {
  const unsigned blocks = cuda_detail::chunk_blocks(segments, partials);
  if (blocks == 0) return;
  CudaDevice& d = cuda_device_of(param);
  DeviceGuard guard(d.device());
  cuda_detail::lamb_apply_kernel<<<blocks, cuda_detail::kThreads, 0, d.stream()>>>(
      param.data<float>(), m.data<float>(), v.data<float>(), segments.data<std::int32_t>(), partials.data<float>(), h,
      cuda_detail::device_hyper<LambHyper>(source), cuda_detail::skip_flag(source));
  DPL_CUDA_CHECK(cudaGetLastError());
}

void segment_norms_cuda(const Tensor& param, const Tensor& grad, const Tensor& segments, Tensor& partials) {
  const unsigned blocks = cuda_detail::chunk_blocks(segments, partials);
  if (blocks == 0) return;
  CudaDevice& d = cuda_device_of(param);
  DeviceGuard guard(d.device());
  cuda_detail::segment_norms_kernel<<<blocks, cuda_detail::kThreads, 0, d.stream()>>>(
      param.data<float>(), grad.data<float>(), segments.data<std::int32_t>(), partials.data<float>());
  DPL_CUDA_CHECK(cudaGetLastError());
}

void lars_update_cuda(Tensor& param, const Tensor& grad, Tensor& velocity, const Tensor& segments,
                      const Tensor& partials, const LarsHyper& h, const UpdateSource& source) {
  const unsigned blocks = cuda_detail::chunk_blocks(segments, partials);
  if (blocks == 0) return;
  CudaDevice& d = cuda_device_of(param);
  DeviceGuard guard(d.device());
  cuda_detail::lars_kernel<<<blocks, cuda_detail::kThreads, 0, d.stream()>>>(
      param.data<float>(), grad.data<float>(), velocity.data<float>(), segments.data<std::int32_t>(),
      partials.data<float>(), h, cuda_detail::device_hyper<LarsHyper>(source), cuda_detail::skip_flag(source));
  DPL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

DPL_REGISTER_KERNEL(sgd_update, kCuda, sgd_update_cuda);
DPL_REGISTER_KERNEL(momentum_update, kCuda, momentum_update_cuda);
DPL_REGISTER_KERNEL(adam_update, kCuda, adam_update_cuda);
DPL_REGISTER_KERNEL(adamw_update, kCuda, adamw_update_cuda);
DPL_REGISTER_KERNEL(rmsprop_update, kCuda, rmsprop_update_cuda);
DPL_REGISTER_KERNEL(adagrad_update, kCuda, adagrad_update_cuda);
DPL_REGISTER_KERNEL(lamb_moments, kCuda, lamb_moments_cuda);
DPL_REGISTER_KERNEL(lamb_apply, kCuda, lamb_apply_cuda);
DPL_REGISTER_KERNEL(segment_norms, kCuda, segment_norms_cuda);
DPL_REGISTER_KERNEL(lars_update, kCuda, lars_update_cuda);

}  // namespace dpl::backend
