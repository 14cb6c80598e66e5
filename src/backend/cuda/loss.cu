// Softmax cross-entropy (forward and backward), accuracy, the pointwise losses and the negative
// log-likelihood, for float32, bfloat16 and float16 (computed in float).
//
// Cross-entropy's forward gives each row to a block (a language model's rows are as long as its
// vocabulary) and accuracy each row to a warp; both end in the one-launch reduction of
// device_utils.cuh, so the mean loss and the accuracy are written on the device by the same
// launch, in an order that does not depend on timing.
#include <math_constants.h>

#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/kernels.hpp"
#include "backend/loss_math.hpp"

namespace dpl::backend {

namespace cuda_detail {
namespace {

constexpr int kWarpsPerBlock = kThreads / 32;

// ============================================================================================
// kernels
// ============================================================================================

/// Merges the (max, sum of exp(x - max)) pair (om, os) into (m, s); (-inf, 0) is the empty pair.
__device__ __forceinline__ void merge_exp_sum(float& m, float& s, float om, float os) {
  const float nm = fmaxf(m, om);
  if (nm == -INFINITY) return;  // both empty (or all -inf): nothing to rescale
  s = s * expf(m - nm) + os * expf(om - nm);
  m = nm;
}

// The gradient of softmax cross-entropy at one logit x of a row with log-sum-exp lse: scale *
// (softmax - target), the target (1 - smoothing) at the label plus smoothing / C (uniform)
// everywhere. Both kernels that write the gradient take it from here, so they agree bit for bit.
__device__ __forceinline__ float xent_logit_grad(float x, float lse, bool at_label, float scale, float smoothing,
                                                 float uniform) {
  return scale * (expf(x - lse) - (at_label ? 1.f - smoothing : 0.f) - uniform);
}

// One block per row (rows are vocabulary-long in a language model: 50k classes), V-element packs,
// one pass: each thread keeps a running (max, sum of exponentials) pair, rescaled as its max grows,
// and the pairs meet in a fixed shuffle tree and then across the warps. Writes each row's
// log-sum-exp for backward and adds the rows' losses in the one-launch reduction. With kGrad the
// block then goes over its row a second time, while the row is still in L2, and writes the
// logits' gradient over the logits (xent_logit_grad on the same log-sum-exp, so the result is
// softmax_xent_backward's bit for bit): a language model's head
// reads its (rows, 50k) logits once from memory instead of twice.
template <int V, bool kGrad, typename T, typename L, typename G>
__global__ void __launch_bounds__(kThreads)
    softmax_xent_kernel(const T* logits, const std::int32_t* labels, float smoothing, float* lse, L* loss,
                        std::int64_t rows, std::int64_t cols, double* partials, unsigned* counter, const G* gloss,
                        T* glogits) {
  __shared__ float part_m[kWarpsPerBlock], part_s[kWarpsPerBlock], part_sum[kWarpsPerBlock], row_lse;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float scale = kGrad && rows ? to_float(gloss[0]) / static_cast<float>(rows) : 0.f;
  const float uniform = smoothing / static_cast<float>(cols);
  const std::int64_t packs = cols / V;
  double row_losses = 0.0;  // thread 0 only
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = logits + r * cols;
    float m = -INFINITY, s = 0.f, row_sum = 0.f;
    for (std::int64_t k = threadIdx.x; k < packs; k += blockDim.x) {
      float v[V];
      load_vec<V>(x + k * V, v);
      float pm = v[0];
#pragma unroll
      for (int j = 1; j < V; ++j) pm = fmaxf(pm, v[j]);
      float ps = 0.f;
      if (pm != -INFINITY)
#pragma unroll
        for (int j = 0; j < V; ++j) ps += expf(v[j] - pm);
#pragma unroll
      for (int j = 0; j < V; ++j) row_sum += v[j];
      merge_exp_sum(m, s, pm, ps);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);
      merge_exp_sum(m, s, om, os);
      row_sum += __shfl_xor_sync(0xffffffffu, row_sum, o);
    }
    if (lane == 0) {
      part_m[warp] = m;
      part_s[warp] = s;
      part_sum[warp] = row_sum;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      m = part_m[0];
      s = part_s[0];
      row_sum = part_sum[0];
      for (int w = 1; w < kWarpsPerBlock; ++w) {
        merge_exp_sum(m, s, part_m[w], part_s[w]);
        row_sum += part_sum[w];
      }
      const float l = m + logf(s);
      lse[r] = l;
      row_lse = l;
      // Labels on the device are not range-checked per call (that would stall every step): an
      // out-of-range label makes the loss NaN instead of reading outside the row. Smoothing puts
      // smoothing / C of the target on every class (see the CPU kernel).
      const std::int32_t t = labels[r];
      const float smoothed = smoothing == 0.f ? 0.f : smoothing / static_cast<float>(cols) * row_sum;
      row_losses += (t >= 0 && t < cols) ? static_cast<double>(l - (1.f - smoothing) * to_float(x[t]) - smoothed)
                                         : CUDART_NAN;
    }
    __syncthreads();  // the partials are read before the next row writes them
    if constexpr (kGrad) {
      // Thread 0 read the label's logit above, before this barrier: now the row may be overwritten.
      // The next row's thread 0 writes row_lse only after the barrier that ends its reduction.
      const float l = row_lse;
      const std::int32_t t = labels[r];
      const T* x = logits + r * cols;
      T* g = glogits + r * cols;
      for (std::int64_t k = threadIdx.x; k < packs; k += blockDim.x) {
        float v[V];
        load_vec<V>(x + k * V, v);
#pragma unroll
        for (int j = 0; j < V; ++j)
          v[j] = xent_logit_grad(v[j], l, k * V + j == t, scale, smoothing, uniform);
        store_vec<V>(g + k * V, v);
      }
    }
  }
  const double block = block_sum(row_losses);
  double total = 0.0;
  if (last_block_total(block, partials, counter, &total) && threadIdx.x == 0) {
    loss[0] = from_float<L>(rows ? static_cast<float>(total / static_cast<double>(rows)) : 0.f);
  }
}

// Elementwise over V-element packs (cols % V == 0, so a pack never crosses rows). glogits may be
// logits: each thread reads a pack before it writes the same pack.
template <int V, bool acc, typename T, typename G>
__global__ void softmax_xent_backward_kernel(const T* logits, const std::int32_t* labels, const float* lse,
                                             float smoothing, const G* gloss, T* glogits, std::int64_t rows,
                                             std::int64_t cols) {
  const float scale = rows ? to_float(gloss[0]) / static_cast<float>(rows) : 0.f;
  const float uniform = smoothing / static_cast<float>(cols);
  const std::int64_t packs = rows * cols / V;
  for (std::int64_t p = global_thread(); p < packs; p += grid_threads()) {
    const std::int64_t i = p * V, r = i / cols, j0 = i - r * cols;
    const float l = lse[r];
    const std::int32_t t = labels[r];
    float v[V], o[V];
    load_vec<V>(logits + i, v);
    if constexpr (acc) load_vec<V>(glogits + i, o);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float d = xent_logit_grad(v[j], l, j0 + j == t, scale, smoothing, uniform);
      o[j] = acc ? o[j] + d : d;
    }
    store_vec<V>(glogits + i, o);
  }
}

template <typename T>
__global__ void accuracy_kernel(const T* logits, const std::int32_t* labels, T* out, std::int64_t rows,
                                std::int64_t cols, double* partials, unsigned* counter) {
  const int lane = threadIdx.x & 31;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  double correct = 0.0;  // lane 0 only; counts are exact in a double
  for (std::int64_t r = first; r < rows; r += step) {
    const T* x = logits + r * cols;
    // The first index of the largest value wins, as on the CPU.
    const std::int64_t arg = warp_argmax(x, cols, [cols](float av, std::int64_t ai, float bv, std::int64_t bi) {
      return ai != cols && (bi == cols || av > bv || (av == bv && ai < bi));
    });
    if (lane == 0) correct += arg == labels[r] ? 1.0 : 0.0;
  }
  const double block = block_sum(correct);
  double total = 0.0;
  if (last_block_total(block, partials, counter, &total) && threadIdx.x == 0) {
    out[0] = from_float<T>(rows ? static_cast<float>(total) / static_cast<float>(rows) : 0.f);
  }
}

// --- pointwise losses and the negative log-likelihood ------------------------------------------

// pos_weight of flat element i: pw cycles over pw_n values (0: none, weight 1).
template <typename T>
__device__ __forceinline__ float pos_weight_at(const T* pw, std::int64_t pw_n, std::int64_t i) {
  return pw_n == 0 ? 1.f : to_float(pw[pw_n == 1 ? 0 : i % pw_n]);
}

template <typename T>
__global__ void pointwise_loss_map_kernel(PointwiseLoss kind, float param, const T* x, const T* t, const T* pw,
                                          std::int64_t pw_n, T* out, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    out[i] = from_float<T>(
        pointwise_loss_value(kind, param, to_float(x[i]), to_float(t[i]), pos_weight_at(pw, pw_n, i)));
}

template <typename T>
__global__ void pointwise_loss_reduce_kernel(PointwiseLoss kind, float param, const T* x, const T* t, const T* pw,
                                             std::int64_t pw_n, bool mean, T* out, std::int64_t n, double* partials,
                                             unsigned* counter) {
  double acc = 0.0;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    acc += static_cast<double>(
        pointwise_loss_value(kind, param, to_float(x[i]), to_float(t[i]), pos_weight_at(pw, pw_n, i)));
  const double block = block_sum(acc);
  double total = 0.0;
  if (last_block_total(block, partials, counter, &total) && threadIdx.x == 0)
    out[0] = from_float<T>(static_cast<float>(mean ? total / static_cast<double>(n) : total));
}

template <bool acc, typename T>
__global__ void pointwise_loss_backward_kernel(PointwiseLoss kind, float param, const T* x, const T* t, const T* pw,
                                               std::int64_t pw_n, const T* gy, bool scalar, float alpha, T* g,
                                               std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float d = pointwise_loss_derivative(kind, param, to_float(x[i]), to_float(t[i]), pos_weight_at(pw, pw_n, i));
    const float v = alpha * to_float(gy[scalar ? 0 : i]) * d;
    g[i] = from_float<T>(acc ? to_float(g[i]) + v : v);
  }
}

// -logp[r, label, k] of element e = r * inner + k; 0 when ignored, NaN for a label outside [0, C).
template <typename T, typename L>
__device__ __forceinline__ float nll_at(const T* logp, const L* labels, std::int64_t ignore, std::int64_t classes,
                                        std::int64_t inner, std::int64_t e) {
  const auto label = static_cast<std::int64_t>(labels[e]);
  if (label == ignore) return 0.f;
  if (label < 0 || label >= classes) return CUDART_NAN_F;
  const std::int64_t r = e / inner, k = e - r * inner;
  return -to_float(logp[(r * classes + label) * inner + k]);
}

template <typename T, typename L>
__global__ void nll_map_kernel(const T* logp, const L* labels, std::int64_t ignore, std::int64_t classes,
                               std::int64_t inner, T* out, std::int64_t n) {
  for (std::int64_t e = global_thread(); e < n; e += grid_threads())
    out[e] = from_float<T>(nll_at(logp, labels, ignore, classes, inner, e));
}

// count: total[0] = the number of elements not ignored. Otherwise out[0] = the sum of their
// losses, divided by total[0] when `mean` (total written by the count launch before it).
template <bool count, typename T, typename L>
__global__ void nll_reduce_kernel(const T* logp, const L* labels, std::int64_t ignore, std::int64_t classes,
                                  std::int64_t inner, bool mean, T* out, float* total, std::int64_t n,
                                  double* partials, unsigned* counter) {
  double acc = 0.0;
  for (std::int64_t e = global_thread(); e < n; e += grid_threads()) {
    if constexpr (count) acc += static_cast<std::int64_t>(labels[e]) != ignore ? 1.0 : 0.0;
    else acc += static_cast<double>(nll_at(logp, labels, ignore, classes, inner, e));
  }
  const double block = block_sum(acc);
  double sum = 0.0;
  if (last_block_total(block, partials, counter, &sum) && threadIdx.x == 0) {
    if constexpr (count) total[0] = static_cast<float>(sum);
    else out[0] = from_float<T>(static_cast<float>(mean ? sum / static_cast<double>(total[0]) : sum));
  }
}

template <bool acc, typename T, typename L>
__global__ void nll_backward_kernel(const L* labels, std::int64_t ignore, LossReduction reduction, const T* gy,
                                    const float* total, T* g, std::int64_t classes, std::int64_t inner,
                                    std::int64_t n) {
  const float scale = reduction == LossReduction::kMean ? 1.f / total[0] : 1.f;
  for (std::int64_t e = global_thread(); e < n; e += grid_threads()) {
    const std::int64_t k = e % inner, c = (e / inner) % classes, r = e / (inner * classes);
    const std::int64_t m = r * inner + k;
    const auto label = static_cast<std::int64_t>(labels[m]);
    const float gm = reduction == LossReduction::kNone ? to_float(gy[m]) : to_float(gy[0]) * scale;
    const float v = label != ignore && label == c ? -gm : 0.f;
    g[e] = from_float<T>(acc ? to_float(g[e]) + v : v);
  }
}

// ============================================================================================
// launchers
// ============================================================================================

unsigned row_grid(std::int64_t rows, int device) {
  unsigned grid = grid_for(rows, kWarpsPerBlock, device);
  return grid > static_cast<unsigned>(CudaDevice::kMaxReduceBlocks) ? CudaDevice::kMaxReduceBlocks : grid;
}

// glogits null: the loss only; given (it may be logits), the logits' gradient for gloss goes there.
template <typename T, typename L, typename G>
void launch_softmax_xent(const T* logits, const std::int32_t* labels, float smoothing, float* lse, L* loss,
                         std::int64_t rows, std::int64_t cols, const G* gloss, T* glogits,
                         const CudaDevice::ReduceScratch& s, int device, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(std::max<std::int64_t>(
      1, std::min<std::int64_t>(rows, std::min<std::int64_t>(CudaDevice::kMaxReduceBlocks, 8 * sm_count(device)))));
  with_pack_width<T>(static_cast<int>(cols), {logits, glogits}, [&](auto v) {
    constexpr int kV = decltype(v)::value;
    if (glogits != nullptr)
      softmax_xent_kernel<kV, true, T, L, G><<<grid, kThreads, 0, stream>>>(
          logits, labels, smoothing, lse, loss, rows, cols, s.partials, s.counter, gloss, glogits);
    else
      softmax_xent_kernel<kV, false, T, L, G><<<grid, kThreads, 0, stream>>>(
          logits, labels, smoothing, lse, loss, rows, cols, s.partials, s.counter, gloss, glogits);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T, typename G>
void launch_softmax_xent_backward(const T* logits, const std::int32_t* labels, const float* lse, float smoothing,
                                  const G* gloss, bool acc, T* glogits, std::int64_t rows, std::int64_t cols,
                                  int device, cudaStream_t stream) {
  if (rows * cols == 0) return;
  with_pack_width<T>(static_cast<int>(cols), {logits, glogits}, [&](auto v) {
    constexpr int kV = decltype(v)::value;
    const unsigned grid = grid_for(rows * cols / kV, kThreads, device);
    if (acc)
      softmax_xent_backward_kernel<kV, true, T, G>
          <<<grid, kThreads, 0, stream>>>(logits, labels, lse, smoothing, gloss, glogits, rows, cols);
    else
      softmax_xent_backward_kernel<kV, false, T, G>
          <<<grid, kThreads, 0, stream>>>(logits, labels, lse, smoothing, gloss, glogits, rows, cols);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_accuracy(const T* logits, const std::int32_t* labels, T* out, std::int64_t rows, std::int64_t cols,
                     const CudaDevice::ReduceScratch& s, int device, cudaStream_t stream) {
  accuracy_kernel<<<row_grid(rows, device), kThreads, 0, stream>>>(logits, labels, out, rows, cols, s.partials,
                                                                   s.counter);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_pointwise_loss(PointwiseLoss kind, float param, const T* x, const T* t, const T* pw, std::int64_t pw_n,
                           LossReduction reduction, T* out, std::int64_t n, const CudaDevice::ReduceScratch& s,
                           int device, cudaStream_t stream) {
  if (reduction == LossReduction::kNone) {
    if (n == 0) return;
    pointwise_loss_map_kernel<<<grid_for(n, kThreads, device), kThreads, 0, stream>>>(kind, param, x, t, pw, pw_n,
                                                                                      out, n);
  } else {
    const unsigned grid = std::min<unsigned>(grid_for(n, kThreads, device), CudaDevice::kMaxReduceBlocks);
    pointwise_loss_reduce_kernel<<<grid, kThreads, 0, stream>>>(kind, param, x, t, pw, pw_n,
                                                                reduction == LossReduction::kMean, out, n, s.partials,
                                                                s.counter);
  }
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_pointwise_loss_backward(PointwiseLoss kind, float param, const T* x, const T* t, const T* pw,
                                    std::int64_t pw_n, const T* gy, bool scalar, float alpha, bool acc, T* g,
                                    std::int64_t n, int device, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads, device);
  if (acc)
    pointwise_loss_backward_kernel<true><<<grid, kThreads, 0, stream>>>(kind, param, x, t, pw, pw_n, gy, scalar, alpha,
                                                                        g, n);
  else
    pointwise_loss_backward_kernel<false><<<grid, kThreads, 0, stream>>>(kind, param, x, t, pw, pw_n, gy, scalar,
                                                                         alpha, g, n);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T, typename L>
void launch_nll(const T* logp, const L* labels, std::int64_t ignore, LossReduction reduction, T* out, float* total,
                std::int64_t classes, std::int64_t inner, std::int64_t n, const CudaDevice::ReduceScratch& s,
                int device, cudaStream_t stream) {
  const unsigned grid = std::min<unsigned>(grid_for(n, kThreads, device), CudaDevice::kMaxReduceBlocks);
  nll_reduce_kernel<true><<<grid, kThreads, 0, stream>>>(logp, labels, ignore, classes, inner, false, out, total, n,
                                                         s.partials, s.counter);
  DPL_CUDA_CHECK(cudaGetLastError());
  if (reduction == LossReduction::kNone) {
    if (n > 0)
      nll_map_kernel<<<grid_for(n, kThreads, device), kThreads, 0, stream>>>(logp, labels, ignore, classes, inner, out,
                                                                            n);
  } else {
    nll_reduce_kernel<false><<<grid, kThreads, 0, stream>>>(logp, labels, ignore, classes, inner,
                                                            reduction == LossReduction::kMean, out, total, n,
                                                            s.partials, s.counter);
  }
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T, typename L>
void launch_nll_backward(const L* labels, std::int64_t ignore, LossReduction reduction, const T* gy,
                         const float* total, bool acc, T* g, std::int64_t classes, std::int64_t inner, std::int64_t n,
                         int device, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads, device);
  if (acc)
    nll_backward_kernel<true><<<grid, kThreads, 0, stream>>>(labels, ignore, reduction, gy, total, g, classes, inner,
                                                             n);
  else
    nll_backward_kernel<false><<<grid, kThreads, 0, stream>>>(labels, ignore, reduction, gy, total, g, classes, inner,
                                                              n);
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

void softmax_xent_cuda(const Tensor& logits, const Tensor& labels, float smoothing, Tensor& lse, Tensor& loss) {
  on_device_typed(logits, "softmax_xent", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    // The loss may be float32 beside 16-bit logits (the kernel's contract): the mean is then not rounded.
    const auto launch = [&](auto* out) {
      cuda_detail::launch_softmax_xent(in_ptr<T>(logits), labels.data<std::int32_t>(), smoothing, out_ptr<float>(lse),
                                       out, logits.size(0), logits.size(1), static_cast<const float*>(nullptr),
                                       static_cast<T*>(nullptr), d.scratch(), d.device(), d.stream());
    };
    if (loss.dtype() == kFloat32) launch(out_ptr<float>(loss));
    else launch(out_ptr<T>(loss));
  });
}

void softmax_xent_and_grad_cuda(Tensor& logits, const Tensor& labels, float smoothing, const Tensor& gloss, Tensor& lse,
                                Tensor& loss) {
  on_device_typed(logits, "softmax_xent_and_grad", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    // The loss and gloss may each be float32 beside 16-bit logits (softmax_xent's and
    // softmax_xent_backward's contracts).
    const auto launch = [&](auto* out, const auto* g) {
      cuda_detail::launch_softmax_xent(in_ptr<T>(logits), labels.data<std::int32_t>(), smoothing, out_ptr<float>(lse),
                                       out, logits.size(0), logits.size(1), g, out_ptr<T>(logits), d.scratch(),
                                       d.device(), d.stream());
    };
    const auto with_gloss = [&](auto* out) {
      if (gloss.dtype() == kFloat32) launch(out, in_ptr<float>(gloss));
      else launch(out, in_ptr<T>(gloss));
    };
    if (loss.dtype() == kFloat32) with_gloss(out_ptr<float>(loss));
    else with_gloss(out_ptr<T>(loss));
  });
}

void softmax_xent_backward_cuda(const Tensor& logits, const Tensor& labels, const Tensor& lse, float smoothing,
                                const Tensor& gloss, float beta, Tensor& glogits) {
  on_device_typed(logits, "softmax_xent_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    // gloss may be float32 beside 16-bit logits (the kernel's contract): a scale 16 bits cannot hold.
    const auto launch = [&](const auto* g) {
      cuda_detail::launch_softmax_xent_backward(in_ptr<T>(logits), labels.data<std::int32_t>(), in_ptr<float>(lse),
                                                smoothing, g, beta != 0.f, out_ptr<T>(glogits), logits.size(0),
                                                logits.size(1), d.device(), d.stream());
    };
    if (gloss.dtype() == kFloat32) launch(in_ptr<float>(gloss));
    else launch(in_ptr<T>(gloss));
  });
}

void accuracy_cuda(const Tensor& logits, const Tensor& labels, Tensor& out) {
  on_device_typed(logits, "accuracy", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_accuracy(in_ptr<T>(logits), labels.data<std::int32_t>(), out_ptr<T>(out), logits.size(0),
                                 logits.size(1), d.scratch(), d.device(), d.stream());
  });
}

void pointwise_loss_cuda(PointwiseLoss kind, float param, const Tensor& x, const Tensor& target,
                         const Tensor* pos_weight, LossReduction reduction, Tensor& out) {
  on_device_typed(x, "pointwise_loss", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const T* pw = pos_weight == nullptr ? nullptr : in_ptr<T>(*pos_weight);
    cuda_detail::launch_pointwise_loss(kind, param, in_ptr<T>(x), in_ptr<T>(target), pw,
                                       pos_weight == nullptr ? 0 : pos_weight->numel(), reduction, out_ptr<T>(out),
                                       x.numel(), d.scratch(), d.device(), d.stream());
  });
}

void pointwise_loss_backward_cuda(PointwiseLoss kind, float param, const Tensor& x, const Tensor& target,
                                  const Tensor* pos_weight, const Tensor& gy, float alpha, float beta, Tensor& g) {
  on_device_typed(x, "pointwise_loss_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const T* pw = pos_weight == nullptr ? nullptr : in_ptr<T>(*pos_weight);
    cuda_detail::launch_pointwise_loss_backward(kind, param, in_ptr<T>(x), in_ptr<T>(target), pw,
                                                pos_weight == nullptr ? 0 : pos_weight->numel(), in_ptr<T>(gy),
                                                gy.numel() == 1, alpha, beta != 0.f, out_ptr<T>(g), x.numel(),
                                                d.device(), d.stream());
  });
}

// Calls f(labels as L*) with L the labels' integer type (int32 or int64).
template <typename F>
void with_labels(const Tensor& labels, F&& f) {
  if (labels.dtype() == kInt64) f(static_cast<const std::int64_t*>(labels.raw_data()));
  else f(static_cast<const std::int32_t*>(labels.raw_data()));
}

void nll_loss_cuda(const Tensor& logp, const Tensor& labels, std::int64_t ignore_index, LossReduction reduction,
                   Tensor& out, Tensor& total) {
  on_device_typed(logp, "nll_loss", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    with_labels(labels, [&](const auto* l) {
      cuda_detail::launch_nll(in_ptr<T>(logp), l, ignore_index, reduction, out_ptr<T>(out),
                              static_cast<float*>(total.raw_data()), logp.size(1), logp.size(2), labels.numel(),
                              d.scratch(), d.device(), d.stream());
    });
  });
}

void nll_loss_backward_cuda(const Tensor& labels, std::int64_t ignore_index, LossReduction reduction, const Tensor& gy,
                            const Tensor& total, float beta, Tensor& glogp) {
  on_device_typed(glogp, "nll_loss_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    with_labels(labels, [&](const auto* l) {
      cuda_detail::launch_nll_backward(l, ignore_index, reduction, in_ptr<T>(gy),
                                       static_cast<const float*>(total.raw_data()), beta != 0.f, out_ptr<T>(glogp),
                                       glogp.size(1), glogp.size(2), glogp.numel(), d.device(), d.stream());
    });
  });
}

}  // namespace

DPL_REGISTER_KERNEL(pointwise_loss, kCuda, pointwise_loss_cuda);
DPL_REGISTER_KERNEL(pointwise_loss_backward, kCuda, pointwise_loss_backward_cuda);
DPL_REGISTER_KERNEL(nll_loss, kCuda, nll_loss_cuda);
DPL_REGISTER_KERNEL(nll_loss_backward, kCuda, nll_loss_backward_cuda);

DPL_REGISTER_KERNEL(softmax_xent, kCuda, softmax_xent_cuda);
DPL_REGISTER_KERNEL(softmax_xent_and_grad, kCuda, softmax_xent_and_grad_cuda);
DPL_REGISTER_KERNEL(softmax_xent_backward, kCuda, softmax_xent_backward_cuda);
DPL_REGISTER_KERNEL(accuracy, kCuda, accuracy_cuda);

}  // namespace dpl::backend
