// The bias of the GPU's 2-D convolution (convolution.cpp runs the convolution itself): its add and
// its gradient, two small kernels of our own, which cuDNN's bias calls do not cover for bfloat16.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/cudnn/convolution_bias.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/kernels.hpp"

namespace dpl::backend {

namespace {

// --- kernels -----------------------------------------------------------------------------------

// The channel of element i of an (N, C, H, W) tensor stored NCHW or NHWC.
__device__ __forceinline__ std::int64_t channel_of(std::int64_t i, std::int64_t c, std::int64_t hw, bool nhwc) {
  return nhwc ? i % c : (i / hw) % c;
}

template <typename T>
__global__ void add_bias_kernel(T* y, const T* bias, std::int64_t n, std::int64_t c, std::int64_t hw, bool nhwc) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] = cuda_detail::from_float<T>(cuda_detail::to_float(y[i]) + cuda_detail::to_float(bias[channel_of(i, c, hw, nhwc)]));
}

// One block per channel: its threads stride over the N*H*W elements of that channel, then reduce.
template <typename T>
__global__ void bias_grad_kernel(const T* gy, T* gb, std::int64_t n, std::int64_t c, std::int64_t hw, bool nhwc,
                                 bool accumulate) {
  __shared__ float partial[cuda_detail::kThreads];
  const std::int64_t ch = blockIdx.x;
  float acc = 0.f;
  for (std::int64_t j = threadIdx.x; j < n * hw; j += blockDim.x) {
    const std::int64_t img = j / hw, pix = j % hw;
    const std::int64_t at = nhwc ? (img * hw + pix) * c + ch : (img * c + ch) * hw + pix;
    acc += cuda_detail::to_float(gy[at]);
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = static_cast<int>(blockDim.x) / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    gb[ch] = cuda_detail::from_float<T>(accumulate ? partial[0] + cuda_detail::to_float(gb[ch]) : partial[0]);
}

}  // namespace

// --- launchers ---------------------------------------------------------------------------------

void cuda_detail::add_conv_bias(const Tensor& bias, Tensor& y, bool nhwc) {
  cuda_detail::on_device_typed(y, "conv2d", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const std::int64_t n = y.numel();
    const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((n + cuda_detail::kThreads - 1) / cuda_detail::kThreads, 4096));
    add_bias_kernel<T><<<blocks, cuda_detail::kThreads, 0, d.stream()>>>(
        cuda_detail::out_ptr<T>(y), cuda_detail::in_ptr<T>(bias), n, y.size(1), y.size(2) * y.size(3), nhwc);
    DPL_CUDA_CHECK(cudaGetLastError());
  });
}

namespace {

void conv2d_backward_bias_cuda(const Tensor& gy, float beta, Tensor& gb) {
  if (gb.numel() == 0) return;
  cuda_detail::on_device_typed(gy, "conv2d backward (bias)", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    bias_grad_kernel<T><<<static_cast<unsigned>(gb.numel()), cuda_detail::kThreads, 0, d.stream()>>>(
        cuda_detail::in_ptr<T>(gy), cuda_detail::out_ptr<T>(gb), gy.size(0), gy.size(1), gy.size(2) * gy.size(3),
        gy.memory_format() == MemoryFormat::kChannelsLast, beta != 0.f);
    DPL_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace

DPL_REGISTER_KERNEL(conv2d_backward_bias, kCuda, conv2d_backward_bias_cuda);

}  // namespace dpl::backend
