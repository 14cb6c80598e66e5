#include "backend/cuda/batch_norm_nhwc.hpp"

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/device_utils.cuh"

namespace dpl::backend::cuda_detail {

namespace {

// Reduction grid: blocks of 32 channels x 8 row groups; blockIdx.y splits the rows further.
constexpr int kChannelsPerBlock = 32;
constexpr int kRowGroups = 8;

struct Moments {
  float n, mean, m2;
};

// Chan's combination of two Welford partials.
__device__ __forceinline__ Moments combine(Moments a, Moments b) {
  const float n = a.n + b.n;
  if (n == 0.f) return a;
  const float d = b.mean - a.mean;
  const float wb = b.n / n;
  return {n, a.mean + d * wb, a.m2 + b.m2 + d * d * a.n * wb};
}

// Per-channel moments of the rows [start, rows) stepping by `step`, reduced over the block's
// row groups; one partial per (blockIdx.y, channel).
template <typename T>
__global__ void moments_kernel(const T* x, std::int64_t rows, int c, Moments* partial) {
  __shared__ Moments shared[kRowGroups][kChannelsPerBlock];
  const int ch = blockIdx.x * kChannelsPerBlock + threadIdx.x;
  Moments m{0.f, 0.f, 0.f};
  if (ch < c) {
    const std::int64_t step = static_cast<std::int64_t>(gridDim.y) * kRowGroups;
    for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * kRowGroups + threadIdx.y; r < rows; r += step) {
      const float v = to_float(x[r * c + ch]);
      m.n += 1.f;
      const float d = v - m.mean;
      m.mean += d / m.n;
      m.m2 += d * (v - m.mean);
    }
  }
  shared[threadIdx.y][threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.y != 0 || ch >= c) return;
  for (int g = 1; g < kRowGroups; ++g) m = combine(m, shared[g][threadIdx.x]);
  partial[static_cast<std::int64_t>(blockIdx.y) * c + ch] = m;
}

// One thread per channel: the batch statistics, the running update, and the affine map as
// scale/shift (y = x * scale + shift) for the apply pass.
__global__ void finalize_moments_kernel(const Moments* partial, int groups, int c, const float* weight,
                                        const float* bias, float eps, float momentum, float* running_mean,
                                        float* running_var, float* save_mean, float* save_invstd, float* scale,
                                        float* shift) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  Moments m = partial[ch];
  for (int g = 1; g < groups; ++g) m = combine(m, partial[static_cast<std::int64_t>(g) * c + ch]);
  const float var = m.m2 / m.n;
  const float invstd = rsqrtf(var + eps);
  save_mean[ch] = m.mean;
  save_invstd[ch] = invstd;
  running_mean[ch] = (1.f - momentum) * running_mean[ch] + momentum * m.mean;
  running_var[ch] = (1.f - momentum) * running_var[ch] + momentum * (m.n > 1.f ? m.m2 / (m.n - 1.f) : var);
  scale[ch] = invstd * weight[ch];
  shift[ch] = bias[ch] - m.mean * scale[ch];
}

template <typename T, typename Index>
__global__ void apply_kernel(const T* x, const T* z, bool relu, const float* scale, const float* shift, Index n,
                             int c, T* y) {
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const int ch = static_cast<int>(i % static_cast<Index>(c));
    float v = to_float(x[i]) * scale[ch] + shift[ch];
    if (z != nullptr) v += to_float(z[i]);
    if (relu) v = v > 0.f ? v : (v == v ? 0.f : v);  // NaN stays NaN
    y[i] = from_float<T>(v);
  }
}

// Backward reduction: per channel the sums of g and of g * (x - mean), g = gy masked by y > 0.
template <typename T>
__global__ void grad_sums_kernel(const T* x, const T* y, const T* gy, const float* mean, std::int64_t rows, int c,
                                 float2* partial) {
  __shared__ float2 shared[kRowGroups][kChannelsPerBlock];
  const int ch = blockIdx.x * kChannelsPerBlock + threadIdx.x;
  float2 s{0.f, 0.f};
  if (ch < c) {
    const float mu = mean[ch];
    const std::int64_t step = static_cast<std::int64_t>(gridDim.y) * kRowGroups;
    for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * kRowGroups + threadIdx.y; r < rows; r += step) {
      const std::int64_t i = r * c + ch;
      float g = to_float(gy[i]);
      if (y != nullptr && !(to_float(y[i]) > 0.f)) g = 0.f;
      s.x += g;
      s.y += g * (to_float(x[i]) - mu);
    }
  }
  shared[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || ch >= c) return;
  for (int g = 1; g < kRowGroups; ++g) {
    s.x += shared[g][threadIdx.x].x;
    s.y += shared[g][threadIdx.x].y;
  }
  partial[static_cast<std::int64_t>(blockIdx.y) * c + ch] = s;
}

// Per channel: gweight, gbias, and the coefficients of gx = k * (g - a - (x - mean) * b).
__global__ void finalize_grads_kernel(const float2* partial, int groups, int c, float count, const float* weight,
                                      const float* save_invstd, float* gweight, float* gbias, float* coef) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  float sg = 0.f, sgx = 0.f;
  for (int g = 0; g < groups; ++g) {
    const float2 p = partial[static_cast<std::int64_t>(g) * c + ch];
    sg += p.x;
    sgx += p.y;
  }
  const float invstd = save_invstd[ch];
  gweight[ch] = sgx * invstd;
  gbias[ch] = sg;
  coef[ch] = weight[ch] * invstd;                  // k
  coef[c + ch] = sg / count;                        // a
  coef[2 * c + ch] = invstd * invstd * sgx / count;  // b
}

template <typename T, typename Index>
__global__ void grad_apply_kernel(const T* x, const T* y, const T* gy, const float* mean, const float* coef, Index n,
                                  int c, float beta, T* gx, T* gz) {
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const int ch = static_cast<int>(i % static_cast<Index>(c));
    float g = to_float(gy[i]);
    if (y != nullptr && !(to_float(y[i]) > 0.f)) g = 0.f;
    if (gz != nullptr) gz[i] = from_float<T>(g);
    float v = coef[ch] * (g - coef[c + ch] - (to_float(x[i]) - mean[ch]) * coef[2 * c + ch]);
    if (beta != 0.f) v += beta * to_float(gx[i]);
    gx[i] = from_float<T>(v);
  }
}

// The reduction grid for rows x c: enough blocks to fill the GPU, at least 32 rows per thread.
dim3 reduction_grid(int device, std::int64_t rows, int c, int* groups) {
  const int channel_blocks = (c + kChannelsPerBlock - 1) / kChannelsPerBlock;
  const std::int64_t want = std::max<std::int64_t>(1, 4 * static_cast<std::int64_t>(sm_count(device)) / channel_blocks);
  const std::int64_t most = std::max<std::int64_t>(1, rows / (kRowGroups * 32));
  *groups = static_cast<int>(std::min<std::int64_t>({want, most, 65535}));
  return dim3(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(*groups));
}

unsigned elementwise_blocks(int device, std::int64_t n) {
  const std::int64_t cap = static_cast<std::int64_t>(sm_count(device)) * 16;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>((n + kThreads - 1) / kThreads, cap)));
}

// Calls launch(Index{}) with 32-bit indices when n fits (the channel's modulo is cheaper), else
// 64-bit ones.
template <typename Launch>
void with_index_type(std::int64_t n, Launch&& launch) {
  if (n < (std::int64_t{1} << 31)) launch(std::uint32_t{});
  else launch(std::int64_t{});
}

// An image as the kernels see it: rows x c, the reduction grid over it, and float32 scratch of
// `per_group` floats per (row group, channel) plus `extra` floats per channel.
struct Plan {
  int c;
  std::int64_t rows, n;
  int groups = 1;
  dim3 grid;
  Tensor work;
  float* partial() const { return work.data<float>(); }
  float* per_channel(std::int64_t per_group) const { return work.data<float>() + per_group * groups * c; }
};

Plan plan_for(const Tensor& x, int device, std::int64_t per_group, std::int64_t extra) {
  Plan p;
  p.c = static_cast<int>(x.size(1));
  p.n = x.numel();
  p.rows = p.n / p.c;
  p.grid = reduction_grid(device, p.rows, p.c, &p.groups);
  p.work = Tensor::empty({(per_group * p.groups + extra) * p.c}, TensorOptions(kFloat32, x.device()));
  return p;
}

}  // namespace

void batch_norm_nhwc_train(const Tensor& x, const Tensor* z, bool relu, const Tensor& weight, const Tensor& bias,
                           float eps, float momentum, Tensor& running_mean, Tensor& running_var, Tensor& y,
                           Tensor& save_mean, Tensor& save_invstd) {
  on_device_typed(x, "batch_norm (channels-last)", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    // Partial moments are 3 floats; per channel, the scratch also holds scale and shift.
    const Plan p = plan_for(x, d.device(), 3, 2);
    const int c = p.c, groups = p.groups;
    auto* partial = reinterpret_cast<Moments*>(p.partial());
    float* scale = p.per_channel(3);
    float* shift = scale + c;
    moments_kernel<T><<<p.grid, dim3(kChannelsPerBlock, kRowGroups), 0, d.stream()>>>(in_ptr<T>(x), p.rows, c,
                                                                                        partial);
    DPL_CUDA_CHECK(cudaGetLastError());
    finalize_moments_kernel<<<(c + 127) / 128, 128, 0, d.stream()>>>(
        partial, groups, c, weight.data<float>(), bias.data<float>(), eps, momentum, running_mean.data<float>(),
        running_var.data<float>(), save_mean.data<float>(), save_invstd.data<float>(), scale, shift);
    DPL_CUDA_CHECK(cudaGetLastError());
    const std::int64_t n = p.n;
    const T* zp = z != nullptr ? in_ptr<T>(*z) : nullptr;
    const unsigned blocks = elementwise_blocks(d.device(), n);
    with_index_type(n, [&](auto index) {
      using Index = decltype(index);
      apply_kernel<T, Index><<<blocks, kThreads, 0, d.stream()>>>(in_ptr<T>(x), zp, relu, scale, shift,
                                                                  static_cast<Index>(n), c, out_ptr<T>(y));
    });
    DPL_CUDA_CHECK(cudaGetLastError());
  });
}

void batch_norm_nhwc_backward(const Tensor& x, const Tensor* y, const Tensor& gy, const Tensor& weight,
                              const Tensor& save_mean, const Tensor& save_invstd, float beta, Tensor& gx, Tensor* gz,
                              Tensor& gweight, Tensor& gbias) {
  on_device_typed(x, "batch_norm backward (channels-last)", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    // Partial sums are 2 floats; per channel, the scratch also holds gx's three coefficients.
    const Plan p = plan_for(x, d.device(), 2, 3);
    const int c = p.c, groups = p.groups;
    const std::int64_t rows = p.rows;
    auto* partial = reinterpret_cast<float2*>(p.partial());
    float* coef = p.per_channel(2);
    const T* yp = y != nullptr ? in_ptr<T>(*y) : nullptr;
    grad_sums_kernel<T><<<p.grid, dim3(kChannelsPerBlock, kRowGroups), 0, d.stream()>>>(
        in_ptr<T>(x), yp, in_ptr<T>(gy), save_mean.data<float>(), rows, c, partial);
    DPL_CUDA_CHECK(cudaGetLastError());
    finalize_grads_kernel<<<(c + 127) / 128, 128, 0, d.stream()>>>(partial, groups, c, static_cast<float>(rows),
                                                                  weight.data<float>(), save_invstd.data<float>(),
                                                                  gweight.data<float>(), gbias.data<float>(), coef);
    DPL_CUDA_CHECK(cudaGetLastError());
    const std::int64_t n = p.n;
    T* gzp = gz != nullptr ? out_ptr<T>(*gz) : nullptr;
    const unsigned blocks = elementwise_blocks(d.device(), n);
    with_index_type(n, [&](auto index) {
      using Index = decltype(index);
      grad_apply_kernel<T, Index><<<blocks, kThreads, 0, d.stream()>>>(in_ptr<T>(x), yp, in_ptr<T>(gy),
                                                                       save_mean.data<float>(), coef,
                                                                       static_cast<Index>(n), c, beta, out_ptr<T>(gx),
                                                                       gzp);
    });
    DPL_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace dpl::backend::cuda_detail
