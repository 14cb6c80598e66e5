// Activations, dropout, softmax over the last dimension, argmax and mean squared error, for
// float32, bfloat16 and float16 (computed in float, rounded once on store).
//
// Pointwise kernels are grid-stride loops; the row kernels give each row of the last dimension
// to one warp; the mean squared error ends in the one-launch reduction of device_utils.cuh, so its
// value does not depend on timing.
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/kernels.hpp"

namespace dpl::backend {

namespace cuda_detail {
namespace {

constexpr int kWarpsPerBlock = kThreads / 32;
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
// GELU's tanh approximation, as PyTorch's GeluType::Tanh kernels: sqrt(2/pi) and the cubic term.
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kGeluKappa = 0.044715f;

// ============================================================================================
// kernels
// ============================================================================================

// x^e with PyTorch's special cases: its pow kernels multiply, divide or take the square root for
// these exponents instead of calling powf, which costs tens of instructions per element. The
// branch is uniform across the grid (e is one value per launch).
__device__ __forceinline__ float pow_scalar(float x, float e) {
  if (e == 2.f) return x * x;
  if (e == 0.5f) return sqrtf(x);
  if (e == -0.5f) return 1.f / sqrtf(x);
  if (e == 1.f) return x;
  if (e == -1.f) return 1.f / x;
  if (e == 3.f) return x * x * x;
  if (e == 0.f) return 1.f;
  return powf(x, e);
}

// min(max(x, lo), hi) as kClampMin then kClampMax: comparisons, not fmaxf/fminf, so that NaN
// passes as in PyTorch.
__device__ __forceinline__ float clamp_lower(float x, float lo) { return x < lo ? lo : x; }
__device__ __forceinline__ float clamp_upper(float x, float hi) { return x > hi ? hi : x; }

template <Activation f>
__device__ __forceinline__ float activate(float x, float slope, float upper) {
  if constexpr (f == Activation::kLeakyRelu) return x > 0.f || isnan(x) ? x : slope * x;
  if constexpr (f == Activation::kSigmoid) return 1.f / (1.f + expf(-x));
  if constexpr (f == Activation::kTanh) return tanhf(x);
  if constexpr (f == Activation::kExp) return expf(x);
  if constexpr (f == Activation::kLog) return logf(x);
  if constexpr (f == Activation::kSqrt) return sqrtf(x);
  if constexpr (f == Activation::kRsqrt) return 1.f / sqrtf(x);  // as the CPU: rsqrtf is not correctly rounded
  if constexpr (f == Activation::kAbs) return fabsf(x);
  if constexpr (f == Activation::kPow) return pow_scalar(x, slope);
  if constexpr (f == Activation::kClampMin) return clamp_lower(x, slope);
  if constexpr (f == Activation::kClampMax) return clamp_upper(x, slope);
  if constexpr (f == Activation::kClamp) return clamp_upper(clamp_lower(x, slope), upper);
  if constexpr (f == Activation::kGeluTanh)
    return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kGeluKappa * x * x * x)));
  return 0.5f * x * (1.f + erff(x * kInvSqrt2));
}

// s is the saved input or output (backward_reads_output in kernels.hpp says which).
template <Activation f>
__device__ __forceinline__ float derivative(float s, float slope, float upper) {
  if constexpr (f == Activation::kLeakyRelu) return s > 0.f ? 1.f : slope;
  if constexpr (f == Activation::kSigmoid) return s * (1.f - s);
  if constexpr (f == Activation::kTanh) return 1.f - s * s;
  if constexpr (f == Activation::kExp) return s;
  if constexpr (f == Activation::kLog) return 1.f / s;
  if constexpr (f == Activation::kSqrt) return 1.f / (2.f * s);
  if constexpr (f == Activation::kRsqrt) return -0.5f * s * s * s;
  if constexpr (f == Activation::kAbs) return s > 0.f ? 1.f : s < 0.f ? -1.f : 0.f;
  if constexpr (f == Activation::kPow) return slope == 0.f ? 0.f : slope * pow_scalar(s, slope - 1.f);
  if constexpr (f == Activation::kClampMin) return s >= slope ? 1.f : 0.f;
  if constexpr (f == Activation::kClampMax) return s <= slope ? 1.f : 0.f;
  if constexpr (f == Activation::kClamp) return s >= slope && clamp_lower(s, slope) <= upper ? 1.f : 0.f;
  if constexpr (f == Activation::kGeluTanh) {
    const float s2 = s * s;
    const float t = tanhf(kSqrt2OverPi * (s + kGeluKappa * s2 * s));
    return 0.5f * (1.f + t) + 0.5f * s * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kGeluKappa * s2);
  }
  return 0.5f * (1.f + erff(s * kInvSqrt2)) + s * kInvSqrt2Pi * expf(-0.5f * s * s);
}

// The pointwise maps move 16 bytes per thread and access (kPack<T> elements: 8 16-bit or 4
// float32 values) where every pointer is 16-byte aligned, as whole tensors are: one 2-byte access
// per thread reaches about half of the memory bandwidth. The last n % kPack<T> elements, and
// operands that are not aligned (views at an odd offset), go one element at a time. The math per
// element is the same either way.
__device__ __forceinline__ bool aligned16(const void* a, const void* b, const void* c = nullptr) {
  return ((reinterpret_cast<std::uintptr_t>(a) | reinterpret_cast<std::uintptr_t>(b) |
           reinterpret_cast<std::uintptr_t>(c)) & 15u) == 0;
}

template <Activation f, typename T>
__global__ void activation_kernel(float slope, float upper, const T* x, T* y, std::int64_t n) {
  constexpr int V = kPack<T>;
  std::int64_t done = 0;
  if (aligned16(x, y)) {
    const std::int64_t packs = n / V;
    for (std::int64_t k = global_thread(); k < packs; k += grid_threads()) {
      float v[V];
      load_vec<V>(x + k * V, v);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = activate<f>(v[j], slope, upper);
      store_vec<V>(y + k * V, v);
    }
    done = packs * V;
  }
  for (std::int64_t i = done + global_thread(); i < n; i += grid_threads())
    y[i] = from_float<T>(activate<f>(to_float(x[i]), slope, upper));
}

template <Activation f, bool acc, typename T>
__global__ void activation_backward_kernel(float slope, float upper, const T* s, const T* gy, T* gx, std::int64_t n) {
  constexpr int V = kPack<T>;
  std::int64_t done = 0;
  if (aligned16(s, gy, gx)) {
    const std::int64_t packs = n / V;
    for (std::int64_t k = global_thread(); k < packs; k += grid_threads()) {
      float sv[V], gv[V], out[V];
      load_vec<V>(s + k * V, sv);
      load_vec<V>(gy + k * V, gv);
      if constexpr (acc) load_vec<V>(gx + k * V, out);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float v = gv[j] * derivative<f>(sv[j], slope, upper);
        out[j] = acc ? out[j] + v : v;
      }
      store_vec<V>(gx + k * V, out);
    }
    done = packs * V;
  }
  for (std::int64_t i = done + global_thread(); i < n; i += grid_threads()) {
    const float v = to_float(gy[i]) * derivative<f>(to_float(s[i]), slope, upper);
    gx[i] = from_float<T>(acc ? to_float(gx[i]) + v : v);
  }
}

template <bool acc, typename T>
__global__ void dropout_kernel(float p, std::uint64_t seed, const T* x, T* y, std::int64_t n) {
  const float scale = 1.f / (1.f - p);
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = dropout_keeps(seed, static_cast<std::uint64_t>(i), p) ? to_float(x[i]) * scale : 0.f;
    y[i] = from_float<T>(acc ? to_float(y[i]) + v : v);
  }
}

/// The warp's row and the stride to its next row, for kernels that give a row to a warp.
__device__ __forceinline__ std::int64_t first_warp_row() {
  return static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
}
__device__ __forceinline__ std::int64_t warp_row_stride() {
  return static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
}

template <bool log, typename T>
__global__ void softmax_kernel(const T* x, T* y, std::int64_t rows, std::int64_t cols) {
  const int lane = threadIdx.x & 31;
  for (std::int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    float mx = -INFINITY;
    for (std::int64_t j = lane; j < cols; j += 32) mx = fmaxf(mx, to_float(xr[j]));
    mx = warp_max(mx);
    float s = 0.f;
    for (std::int64_t j = lane; j < cols; j += 32) s += expf(to_float(xr[j]) - mx);
    s = warp_sum(s);
    const float lse = mx + logf(s);
    for (std::int64_t j = lane; j < cols; j += 32) {
      const float v = to_float(xr[j]);
      yr[j] = from_float<T>(log ? v - lse : expf(v - mx) / s);
    }
  }
}

template <bool log, bool acc, typename T>
__global__ void softmax_backward_kernel(const T* y, const T* gy, T* gx, std::int64_t rows, std::int64_t cols) {
  const int lane = threadIdx.x & 31;
  for (std::int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    const std::int64_t off = r * cols;
    float dot = 0.f;
    for (std::int64_t j = lane; j < cols; j += 32)
      dot += log ? to_float(gy[off + j]) : to_float(gy[off + j]) * to_float(y[off + j]);
    dot = warp_sum(dot);
    for (std::int64_t j = lane; j < cols; j += 32) {
      const float yj = to_float(y[off + j]), gj = to_float(gy[off + j]);
      const float v = log ? gj - expf(yj) * dot : yj * (gj - dot);
      gx[off + j] = from_float<T>(acc ? to_float(gx[off + j]) + v : v);
    }
  }
}

// Whether (av, ai) beats (bv, bi) for argmax: NaN beats numbers, then the larger value, then the
// smaller index; index `none` loses to everything.
__device__ __forceinline__ bool argmax_beats(float av, std::int64_t ai, float bv, std::int64_t bi, std::int64_t none) {
  if (ai == none) return false;
  if (bi == none) return true;
  const bool an = isnan(av), bn = isnan(bv);
  if (an != bn) return an;
  if (!an && av != bv) return av > bv;
  return ai < bi;
}

template <typename T>
__global__ void argmax_kernel(const T* x, std::int64_t* out, std::int64_t rows, std::int64_t cols) {
  const int lane = threadIdx.x & 31;
  for (std::int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    const auto beats = [cols](float av, std::int64_t ai, float bv, std::int64_t bi) {
      return argmax_beats(av, ai, bv, bi, cols);
    };
    const std::int64_t arg = warp_argmax(x + r * cols, cols, beats);
    if (lane == 0) out[r] = arg == cols ? 0 : arg;
  }
}

template <typename T>
__global__ void mse_kernel(const T* x, const T* t, std::int64_t n, T* loss, double* partials, unsigned* counter) {
  double acc = 0.0;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float d = to_float(x[i]) - to_float(t[i]);
    acc += static_cast<double>(d * d);
  }
  const double block = block_sum(acc);
  double total = 0.0;
  if (last_block_total(block, partials, counter, &total) && threadIdx.x == 0) {
    loss[0] = from_float<T>(n ? static_cast<float>(total / static_cast<double>(n)) : 0.f);
  }
}

template <bool acc, typename T>
__global__ void mse_backward_kernel(const T* x, const T* t, const T* gloss, float alpha, T* g, std::int64_t n) {
  const float scale = alpha * to_float(gloss[0]) * 2.f / static_cast<float>(n);
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = scale * (to_float(x[i]) - to_float(t[i]));
    g[i] = from_float<T>(acc ? to_float(g[i]) + v : v);
  }
}

// ============================================================================================
// launchers
// ============================================================================================

unsigned row_grid(std::int64_t rows, int device) { return grid_for(rows, kWarpsPerBlock, device); }

// Calls launch(std::integral_constant<Activation, f>{}) for the run-time f: one instantiation of
// each kernel per activation.
template <typename Launch>
void with_activation(Activation f, Launch&& launch) {
  switch (f) {
    case Activation::kLeakyRelu: launch(std::integral_constant<Activation, Activation::kLeakyRelu>{}); break;
    case Activation::kSigmoid: launch(std::integral_constant<Activation, Activation::kSigmoid>{}); break;
    case Activation::kTanh: launch(std::integral_constant<Activation, Activation::kTanh>{}); break;
    case Activation::kGelu: launch(std::integral_constant<Activation, Activation::kGelu>{}); break;
    case Activation::kGeluTanh: launch(std::integral_constant<Activation, Activation::kGeluTanh>{}); break;
    case Activation::kExp: launch(std::integral_constant<Activation, Activation::kExp>{}); break;
    case Activation::kLog: launch(std::integral_constant<Activation, Activation::kLog>{}); break;
    case Activation::kSqrt: launch(std::integral_constant<Activation, Activation::kSqrt>{}); break;
    case Activation::kRsqrt: launch(std::integral_constant<Activation, Activation::kRsqrt>{}); break;
    case Activation::kAbs: launch(std::integral_constant<Activation, Activation::kAbs>{}); break;
    case Activation::kPow: launch(std::integral_constant<Activation, Activation::kPow>{}); break;
    case Activation::kClampMin: launch(std::integral_constant<Activation, Activation::kClampMin>{}); break;
    case Activation::kClampMax: launch(std::integral_constant<Activation, Activation::kClampMax>{}); break;
    case Activation::kClamp: launch(std::integral_constant<Activation, Activation::kClamp>{}); break;
  }
}

template <typename T>
void launch_activation(Activation f, float slope, float upper, const T* x, T* y, std::int64_t n, int device,
                       cudaStream_t stream) {
  if (n == 0) return;
  with_activation(f, [&](auto c) {
    activation_kernel<decltype(c)::value><<<grid_for(n, kThreads, device), kThreads, 0, stream>>>(slope, upper, x, y,
                                                                                                   n);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_activation_backward(Activation f, float slope, float upper, const T* s, const T* gy, bool acc, T* gx,
                                std::int64_t n, int device, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads, device);
  with_activation(f, [&](auto c) {
    constexpr Activation a = decltype(c)::value;
    if (acc) activation_backward_kernel<a, true><<<grid, kThreads, 0, stream>>>(slope, upper, s, gy, gx, n);
    else activation_backward_kernel<a, false><<<grid, kThreads, 0, stream>>>(slope, upper, s, gy, gx, n);
  });
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_dropout(float p, std::uint64_t seed, const T* x, bool acc, T* y, std::int64_t n, int device,
                    cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads, device);
  if (acc) dropout_kernel<true><<<grid, kThreads, 0, stream>>>(p, seed, x, y, n);
  else dropout_kernel<false><<<grid, kThreads, 0, stream>>>(p, seed, x, y, n);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_softmax(bool log, const T* x, T* y, std::int64_t rows, std::int64_t cols, int device, cudaStream_t stream) {
  if (rows * cols == 0) return;
  const unsigned grid = row_grid(rows, device);
  if (log) softmax_kernel<true><<<grid, kThreads, 0, stream>>>(x, y, rows, cols);
  else softmax_kernel<false><<<grid, kThreads, 0, stream>>>(x, y, rows, cols);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_softmax_backward(bool log, const T* y, const T* gy, bool acc, T* gx, std::int64_t rows, std::int64_t cols,
                             int device, cudaStream_t stream) {
  if (rows * cols == 0) return;
  const unsigned grid = row_grid(rows, device);
  if (log && acc) softmax_backward_kernel<true, true><<<grid, kThreads, 0, stream>>>(y, gy, gx, rows, cols);
  else if (log) softmax_backward_kernel<true, false><<<grid, kThreads, 0, stream>>>(y, gy, gx, rows, cols);
  else if (acc) softmax_backward_kernel<false, true><<<grid, kThreads, 0, stream>>>(y, gy, gx, rows, cols);
  else softmax_backward_kernel<false, false><<<grid, kThreads, 0, stream>>>(y, gy, gx, rows, cols);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_argmax(const T* x, std::int64_t* out, std::int64_t rows, std::int64_t cols, int device,
                   cudaStream_t stream) {
  if (rows == 0) return;
  argmax_kernel<<<row_grid(rows, device), kThreads, 0, stream>>>(x, out, rows, cols);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_mse(const T* x, const T* t, std::int64_t n, T* loss, const CudaDevice::ReduceScratch& s, int device,
                cudaStream_t stream) {
  unsigned grid = grid_for(n, kThreads, device);
  if (grid > static_cast<unsigned>(CudaDevice::kMaxReduceBlocks)) grid = CudaDevice::kMaxReduceBlocks;
  mse_kernel<<<grid, kThreads, 0, stream>>>(x, t, n, loss, s.partials, s.counter);
  DPL_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_mse_backward(const T* x, const T* t, const T* gloss, float alpha, bool acc, T* g, std::int64_t n,
                         int device, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads, device);
  if (acc) mse_backward_kernel<true><<<grid, kThreads, 0, stream>>>(x, t, gloss, alpha, g, n);
  else mse_backward_kernel<false><<<grid, kThreads, 0, stream>>>(x, t, gloss, alpha, g, n);
  DPL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace cuda_detail

// ============================================================================================
// kernel implementations
// ============================================================================================

namespace {

using cuda_detail::in_ptr;
using cuda_detail::on_device_typed;
using cuda_detail::out_ptr;

// Rows of the last dimension of x and their length.
std::int64_t cols_of(const Tensor& x) { return x.dim() ? x.size(-1) : 1; }
std::int64_t rows_of(const Tensor& x) { return cols_of(x) ? x.numel() / cols_of(x) : 0; }

void activation_cuda(Activation f, float slope, float upper, const Tensor& x, Tensor& y) {
  on_device_typed(x, "activation", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_activation(f, slope, upper, in_ptr<T>(x), out_ptr<T>(y), x.numel(), d.device(), d.stream());
  });
}

void activation_backward_cuda(Activation f, float slope, float upper, const Tensor& saved, const Tensor& gy,
                              float beta, Tensor& gx) {
  on_device_typed(saved, "activation_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_activation_backward(f, slope, upper, in_ptr<T>(saved), in_ptr<T>(gy), beta != 0.f, out_ptr<T>(gx),
                                            saved.numel(), d.device(), d.stream());
  });
}

void dropout_cuda(float p, std::uint64_t seed, const Tensor& x, float beta, Tensor& y) {
  on_device_typed(x, "dropout", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_dropout(p, seed, in_ptr<T>(x), beta != 0.f, out_ptr<T>(y), x.numel(), d.device(), d.stream());
  });
}

void softmax_cuda(bool log, const Tensor& x, Tensor& y) {
  on_device_typed(x, "softmax", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_softmax(log, in_ptr<T>(x), out_ptr<T>(y), rows_of(x), cols_of(x), d.device(), d.stream());
  });
}

void softmax_backward_cuda(bool log, const Tensor& y, const Tensor& gy, float beta, Tensor& gx) {
  on_device_typed(y, "softmax_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_softmax_backward(log, in_ptr<T>(y), in_ptr<T>(gy), beta != 0.f, out_ptr<T>(gx), rows_of(y),
                                         cols_of(y), d.device(), d.stream());
  });
}

void argmax_cuda(const Tensor& x, Tensor& out) {
  on_device_typed(x, "argmax", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_argmax(in_ptr<T>(x), static_cast<std::int64_t*>(out.raw_data()), rows_of(x), cols_of(x),
                               d.device(), d.stream());
  });
}

void mse_cuda(const Tensor& x, const Tensor& target, Tensor& loss) {
  on_device_typed(x, "mse", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_mse(in_ptr<T>(x), in_ptr<T>(target), x.numel(), out_ptr<T>(loss), d.scratch(), d.device(),
                            d.stream());
  });
}

void mse_backward_cuda(const Tensor& x, const Tensor& target, const Tensor& gloss, float alpha, float beta, Tensor& g) {
  on_device_typed(x, "mse_backward", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    cuda_detail::launch_mse_backward(in_ptr<T>(x), in_ptr<T>(target), in_ptr<T>(gloss), alpha, beta != 0.f,
                                     out_ptr<T>(g), x.numel(), d.device(), d.stream());
  });
}

}  // namespace

DPL_REGISTER_KERNEL(activation, kCuda, activation_cuda);
DPL_REGISTER_KERNEL(activation_backward, kCuda, activation_backward_cuda);
DPL_REGISTER_KERNEL(dropout, kCuda, dropout_cuda);
DPL_REGISTER_KERNEL(softmax, kCuda, softmax_cuda);
DPL_REGISTER_KERNEL(softmax_backward, kCuda, softmax_backward_cuda);
DPL_REGISTER_KERNEL(argmax, kCuda, argmax_cuda);
DPL_REGISTER_KERNEL(mse, kCuda, mse_cuda);
DPL_REGISTER_KERNEL(mse_backward, kCuda, mse_backward_cuda);

}  // namespace dpl::backend
