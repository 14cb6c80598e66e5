// Softmax cross-entropy (forward and backward), accuracy and the label range check.
//
// Forward and accuracy give each row to one warp (rows are short: class counts), and end in the
// one-launch reduction of device_utils.cuh, so the mean loss and the accuracy are written on the
// device by the same launch, in an order that does not depend on timing.
#include <math_constants.h>
#include <climits>
#include <limits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/device_utils.cuh"

namespace dpl::backend {

namespace cuda_detail {
namespace {

constexpr int kWarpsPerBlock = kThreads / 32;

// ============================================================================================
// kernels
// ============================================================================================

__global__ void softmax_xent_kernel(const float* logits, const std::int32_t* labels, float* probs, float* loss,
                                    std::int64_t rows, std::int64_t cols, double* partials, unsigned* counter) {
  const int lane = threadIdx.x & 31;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  double row_losses = 0.0;  // lane 0 only
  for (std::int64_t r = first; r < rows; r += step) {
    const float* x = logits + r * cols;
    float* p = probs + r * cols;
    float mx = -INFINITY;
    for (std::int64_t j = lane; j < cols; j += 32) mx = fmaxf(mx, x[j]);
    mx = warp_max(mx);
    float s = 0.f;
    for (std::int64_t j = lane; j < cols; j += 32) {
      const float e = expf(x[j] - mx);
      p[j] = e;
      s += e;
    }
    s = warp_sum(s);
    const float inv = 1.f / s;
    // Each lane rescales the entries it wrote itself, so no barrier is needed.
    for (std::int64_t j = lane; j < cols; j += 32) p[j] *= inv;
    // Log-sum-exp form: finite even when the true class's probability underflows.
    // Labels on the device are not range-checked per call (that would stall every step): an
    // out-of-range label makes the loss NaN instead of reading outside the row.
    if (lane == 0) {
      const std::int32_t t = labels[r];
      row_losses += (t >= 0 && t < cols) ? static_cast<double>(logf(s) + mx - x[t]) : CUDART_NAN;
    }
  }
  const double block = block_sum(row_losses);
  double total = 0.0;
  if (last_block_total(block, partials, counter, &total) && threadIdx.x == 0) {
    loss[0] = rows ? static_cast<float>(total / static_cast<double>(rows)) : 0.f;
  }
}

template <bool acc>
__global__ void softmax_xent_backward_kernel(const float* probs, const std::int32_t* labels, const float* gloss,
                                             float* glogits, std::int64_t rows, std::int64_t cols) {
  const float scale = rows ? gloss[0] / static_cast<float>(rows) : 0.f;
  const std::int64_t n = rows * cols;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const std::int64_t r = i / cols, j = i - r * cols;
    const float v = scale * (probs[i] - (j == labels[r] ? 1.f : 0.f));
    glogits[i] = acc ? glogits[i] + v : v;
  }
}

__global__ void accuracy_kernel(const float* logits, const std::int32_t* labels, float* out, std::int64_t rows,
                                std::int64_t cols, double* partials, unsigned* counter) {
  const int lane = threadIdx.x & 31;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  double correct = 0.0;  // lane 0 only; counts are exact in a double
  for (std::int64_t r = first; r < rows; r += step) {
    const float* x = logits + r * cols;
    // The first index of the largest value wins, as on the CPU.
    float best = -INFINITY;
    std::int64_t arg = cols;  // "none yet"
    for (std::int64_t j = lane; j < cols; j += 32) {
      if (arg == cols || x[j] > best) {
        best = x[j];
        arg = j;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const std::int64_t oa = __shfl_xor_sync(0xffffffffu, arg, o);
      if (oa != cols && (arg == cols || ob > best || (ob == best && oa < arg))) {
        best = ob;
        arg = oa;
      }
    }
    if (lane == 0) correct += arg == labels[r] ? 1.0 : 0.0;
  }
  const double block = block_sum(correct);
  double total = 0.0;
  if (last_block_total(block, partials, counter, &total) && threadIdx.x == 0) {
    out[0] = rows ? static_cast<float>(total) / static_cast<float>(rows) : 0.f;
  }
}

__global__ void label_range_kernel(const std::int32_t* labels, std::int64_t n, std::int32_t* out) {
  __shared__ std::int32_t lo_part[kThreads / 32], hi_part[kThreads / 32];
  std::int32_t lo = INT_MAX, hi = INT_MIN;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const std::int32_t v = labels[i];
    lo = min(lo, v);
    hi = max(hi, v);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    lo_part[warp] = lo;
    hi_part[warp] = hi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) {
      lo = min(lo, lo_part[w]);
      hi = max(hi, hi_part[w]);
    }
    out[0] = lo;
    out[1] = hi;
  }
}

// ============================================================================================
// launchers
// ============================================================================================

unsigned row_grid(std::int64_t rows, int device) {
  unsigned grid = grid_for(rows, kWarpsPerBlock, device);
  return grid > static_cast<unsigned>(CudaKernels::kMaxReduceBlocks) ? CudaKernels::kMaxReduceBlocks : grid;
}

void launch_softmax_xent(const float* logits, const std::int32_t* labels, float* probs, float* loss, std::int64_t rows,
                         std::int64_t cols, const CudaKernels::ReduceScratch& s, int device, cudaStream_t stream) {
  softmax_xent_kernel<<<row_grid(rows, device), kThreads, 0, stream>>>(logits, labels, probs, loss, rows, cols,
                                                                       s.partials, s.counter);
  DPL_CUDA_CHECK(cudaGetLastError());
}

void launch_softmax_xent_backward(const float* probs, const std::int32_t* labels, const float* gloss, bool acc,
                                  float* glogits, std::int64_t rows, std::int64_t cols, int device,
                                  cudaStream_t stream) {
  if (rows * cols == 0) return;
  const unsigned grid = grid_for(rows * cols, kThreads, device);
  if (acc) softmax_xent_backward_kernel<true><<<grid, kThreads, 0, stream>>>(probs, labels, gloss, glogits, rows, cols);
  else softmax_xent_backward_kernel<false><<<grid, kThreads, 0, stream>>>(probs, labels, gloss, glogits, rows, cols);
  DPL_CUDA_CHECK(cudaGetLastError());
}

void launch_accuracy(const float* logits, const std::int32_t* labels, float* out, std::int64_t rows, std::int64_t cols,
                     const CudaKernels::ReduceScratch& s, int device, cudaStream_t stream) {
  accuracy_kernel<<<row_grid(rows, device), kThreads, 0, stream>>>(logits, labels, out, rows, cols, s.partials,
                                                                   s.counter);
  DPL_CUDA_CHECK(cudaGetLastError());
}

void launch_label_range(const std::int32_t* labels, std::int64_t n, std::int32_t* out, cudaStream_t stream) {
  label_range_kernel<<<1, kThreads, 0, stream>>>(labels, n, out);
  DPL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace cuda_detail

// ============================================================================================
// Kernels methods
// ============================================================================================

using cuda_detail::DeviceGuard;

void CudaKernels::softmax_xent(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& loss) {
  DeviceGuard guard(device_);
  cuda_detail::launch_softmax_xent(logits.data<float>(), labels.data<std::int32_t>(), probs.data<float>(),
                                   loss.data<float>(), logits.size(0), logits.size(1), scratch_, device_, stream_);
}

void CudaKernels::softmax_xent_backward(const Tensor& probs, const Tensor& labels, const Tensor& gloss, float beta,
                                        Tensor& glogits) {
  DeviceGuard guard(device_);
  cuda_detail::launch_softmax_xent_backward(probs.data<float>(), labels.data<std::int32_t>(), gloss.data<float>(),
                                            beta != 0.f, glogits.data<float>(), probs.size(0), probs.size(1), device_,
                                            stream_);
}

void CudaKernels::accuracy(const Tensor& logits, const Tensor& labels, Tensor& out) {
  DeviceGuard guard(device_);
  cuda_detail::launch_accuracy(logits.data<float>(), labels.data<std::int32_t>(), out.data<float>(), logits.size(0),
                               logits.size(1), scratch_, device_, stream_);
}

void CudaKernels::label_range(const Tensor& labels, std::int64_t& lo, std::int64_t& hi) {
  std::lock_guard<std::mutex> lock(range_mutex_);
  DeviceGuard guard(device_);
  // The kernel writes into mapped host memory; the stream sync makes the values visible here.
  cuda_detail::launch_label_range(labels.data<std::int32_t>(), labels.numel(), range_dev_, stream_);
  DPL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (labels.numel() == 0) {
    lo = std::numeric_limits<std::int64_t>::max();
    hi = std::numeric_limits<std::int64_t>::min();
    return;
  }
  lo = range_host_[0];
  hi = range_host_[1];
}

}  // namespace dpl::backend
