// Softmax cross-entropy (forward and backward) and accuracy, for float32, bfloat16 and float16
// logits (computed in float).
//
// Forward and accuracy give each row to one warp (rows are short: class counts), and end in the
// one-launch reduction of device_utils.cuh, so the mean loss and the accuracy are written on the
// device by the same launch, in an order that does not depend on timing.
#include <math_constants.h>
#include <type_traits>

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

template <typename T>
__global__ void softmax_xent_kernel(const T* logits, const std::int32_t* labels, float smoothing, T* probs, T* loss,
                                    std::int64_t rows, std::int64_t cols, double* partials, unsigned* counter) {
  const int lane = threadIdx.x & 31;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  double row_losses = 0.0;  // lane 0 only
  for (std::int64_t r = first; r < rows; r += step) {
    const T* x = logits + r * cols;
    T* p = probs + r * cols;
    float mx = -INFINITY;
    for (std::int64_t j = lane; j < cols; j += 32) mx = fmaxf(mx, to_float(x[j]));
    mx = warp_max(mx);
    float s = 0.f, row_sum = 0.f;
    for (std::int64_t j = lane; j < cols; j += 32) {
      row_sum += to_float(x[j]);
      const float e = expf(to_float(x[j]) - mx);
      // float32 keeps e for the rescaling below; a 16-bit probability must be rounded only once,
      // so there the exponential is recomputed instead.
      if constexpr (std::is_same_v<T, float>) p[j] = e;
      s += e;
    }
    s = warp_sum(s);
    row_sum = warp_sum(row_sum);
    const float inv = 1.f / s;
    // Each lane rescales the entries it wrote itself, so no barrier is needed.
    for (std::int64_t j = lane; j < cols; j += 32) {
      if constexpr (std::is_same_v<T, float>) p[j] *= inv;
      else p[j] = from_float<T>(expf(to_float(x[j]) - mx) * inv);
    }
    // Log-sum-exp form: finite even when the true class's probability underflows.
    // Labels on the device are not range-checked per call (that would stall every step): an
    // out-of-range label makes the loss NaN instead of reading outside the row.
    if (lane == 0) {
      const std::int32_t t = labels[r];
      // Smoothing puts smoothing / C of the target on every class (see the CPU kernel).
      const float smoothed = smoothing == 0.f ? 0.f : smoothing / static_cast<float>(cols) * row_sum;
      row_losses += (t >= 0 && t < cols)
                        ? static_cast<double>(logf(s) + mx - (1.f - smoothing) * to_float(x[t]) - smoothed)
                        : CUDART_NAN;
    }
  }
  const double block = block_sum(row_losses);
  double total = 0.0;
  if (last_block_total(block, partials, counter, &total) && threadIdx.x == 0) {
    loss[0] = from_float<T>(rows ? static_cast<float>(total / static_cast<double>(rows)) : 0.f);
  }
}

template <bool acc, typename T>
__global__ void softmax_xent_backward_kernel(const T* probs, const std::int32_t* labels, float smoothing, const T* gloss,
                                             T* glogits, std::int64_t rows, std::int64_t cols) {
  const float scale = rows ? to_float(gloss[0]) / static_cast<float>(rows) : 0.f;
  const float uniform = smoothing / static_cast<float>(cols);
  const std::int64_t n = rows * cols;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const std::int64_t r = i / cols, j = i - r * cols;
    const float v = scale * (to_float(probs[i]) - (j == labels[r] ? 1.f - smoothing : 0.f) - uniform);
    glogits[i] = from_float<T>(acc ? to_float(glogits[i]) + v : v);
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

// ============================================================================================
// launchers
// ============================================================================================

unsigned row_grid(std::int64_t rows, int device) {
  unsigned grid = grid_for(rows, kWarpsPerBlock, device);
  return grid > static_cast<unsigned>(CudaDevice::kMaxReduceBlocks) ? CudaDevice::kMaxReduceBlocks : grid;
}

template <typename T>
void launch_softmax_xent(const T* logits, const std::int32_t* labels, float smoothing, T* probs, T* loss,
                         std::int64_t rows, std::int64_t cols, const CudaDevice::ReduceScratch& s, int device,
                         cudaStream_t stream) {
  softmax_xent_kernel<<<row_grid(rows, device), kThreads, 0, stream>>>(logits, labels, smoothing, probs, loss, rows,
                                                                       cols, s.partials, s.counter);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_softmax_xent_backward(const T* probs, const std::int32_t* labels, float smoothing, const T* gloss, bool acc,
                                  T* glogits, std::int64_t rows, std::int64_t cols, int device, cudaStream_t stream) {
  if (rows * cols == 0) return;
  const unsigned grid = grid_for(rows * cols, kThreads, device);
  if (acc)
    softmax_xent_backward_kernel<true>
        <<<grid, kThreads, 0, stream>>>(probs, labels, smoothing, gloss, glogits, rows, cols);
  else
    softmax_xent_backward_kernel<false>
        <<<grid, kThreads, 0, stream>>>(probs, labels, smoothing, gloss, glogits, rows, cols);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_accuracy(const T* logits, const std::int32_t* labels, T* out, std::int64_t rows, std::int64_t cols,
                     const CudaDevice::ReduceScratch& s, int device, cudaStream_t stream) {
  accuracy_kernel<<<row_grid(rows, device), kThreads, 0, stream>>>(logits, labels, out, rows, cols, s.partials,
                                                                   s.counter);
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

void softmax_xent_cuda(const Tensor& logits, const Tensor& labels, float smoothing, Tensor& probs, Tensor& loss) {
  on_device_typed(logits, "softmax_xent", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_softmax_xent(in_ptr<T>(logits), labels.data<std::int32_t>(), smoothing, out_ptr<T>(probs),
                                     out_ptr<T>(loss), logits.size(0), logits.size(1), d.scratch(), d.device(),
                                     d.stream());
  });
}

void softmax_xent_backward_cuda(const Tensor& probs, const Tensor& labels, float smoothing, const Tensor& gloss,
                                float beta, Tensor& glogits) {
  on_device_typed(probs, "softmax_xent_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_softmax_xent_backward(in_ptr<T>(probs), labels.data<std::int32_t>(), smoothing,
                                              in_ptr<T>(gloss), beta != 0.f, out_ptr<T>(glogits), probs.size(0), probs.size(1),
                                              d.device(), d.stream());
  });
}

void accuracy_cuda(const Tensor& logits, const Tensor& labels, Tensor& out) {
  on_device_typed(logits, "accuracy", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_accuracy(in_ptr<T>(logits), labels.data<std::int32_t>(), out_ptr<T>(out), logits.size(0),
                                 logits.size(1), d.scratch(), d.device(), d.stream());
  });
}

}  // namespace

DPL_REGISTER_KERNEL(softmax_xent, kCuda, softmax_xent_cuda);
DPL_REGISTER_KERNEL(softmax_xent_backward, kCuda, softmax_xent_backward_cuda);
DPL_REGISTER_KERNEL(accuracy, kCuda, accuracy_cuda);

}  // namespace dpl::backend
