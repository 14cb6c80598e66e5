// Optimizer updates: each is one kernel launch over the whole parameter arena, reading and
// writing every state array once. Arenas are 64-byte aligned with lengths that are multiples of
// 16 floats, so they always take the 16-byte vector path.
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

}  // namespace

DPL_REGISTER_KERNEL(sgd_update, kCuda, sgd_update_cuda);
DPL_REGISTER_KERNEL(momentum_update, kCuda, momentum_update_cuda);
DPL_REGISTER_KERNEL(adam_update, kCuda, adam_update_cuda);

}  // namespace dpl::backend
