// 2-D convolution on the GPU through cuDNN's convolution API, plus two small kernels of our own
// for the bias (its add and its gradient), which cuDNN's bias calls do not cover for bfloat16.
//
// Descriptors carry the tensors' layout (CUDNN_TENSOR_NCHW or CUDNN_TENSOR_NHWC for images and
// filters) and float32 compute for every dtype, so 16-bit convolutions accumulate in float32.
// Math: tensor cores for 16-bit; for float32, FMA only unless dpl::cuda::allow_tf32() is on.
//
// The algorithm is chosen once per problem (device, kind, dtype, layout, extents, geometry, math)
// and kept. With DPL_CUDNN_BENCHMARK=1 (the default) the first call of a problem times cuDNN's
// candidates on scratch buffers (a one-time host wait); with 0 it takes the first deterministic
// algorithm of cuDNN's heuristics, so results repeat bit for bit. Workspaces come from the
// device's caching allocator and every call is queued on the compute stream: after the first
// call of a shape, nothing waits on the host.
#include <algorithm>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cudnn/cudnn_runtime.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda_api.hpp"
#include "backend/kernels.hpp"
#include "dpl/core/settings.hpp"

namespace dpl::backend {

namespace {

using cuda_detail::cudnn_handle;
using cuda_detail::DeviceGuard;
using cuda_detail::Workspace;

enum class ConvKind { kForward, kBackwardData, kBackwardWeight };

bool channels_last(const Tensor& image) { return image.is_channels_last() && !image.is_contiguous(); }

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::kBFloat16: return CUDNN_DATA_BFLOAT16;
    case DType::kFloat16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
  }
}

int as_int(std::int64_t v, const char* what) {
  DPL_CHECK(v <= 2147483647, "conv2d: cuDNN takes 32-bit extents, got ", what, " = ", v);
  return static_cast<int>(v);
}

// --- descriptors (owned, destroyed with the call) ---------------------------------------------
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(const Shape& s, DType t, bool nhwc) {
    DPL_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    DPL_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, cudnn_type(t),
                                               as_int(s[0], "N"), as_int(s[1], "C"), as_int(s[2], "H"),
                                               as_int(s[3], "W")));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(const Shape& s, DType t, bool nhwc) {
    DPL_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    DPL_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, cudnn_type(t), nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                               as_int(s[0], "out channels"), as_int(s[1], "in channels"),
                                               as_int(s[2], "kh"), as_int(s[3], "kw")));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const Conv2dParams& p, cudnnMathType_t math) {
    DPL_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    DPL_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        d, as_int(p.padding[0], "padding"), as_int(p.padding[1], "padding"), as_int(p.stride[0], "stride"),
        as_int(p.stride[1], "stride"), as_int(p.dilation[0], "dilation"), as_int(p.dilation[1], "dilation"),
        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DPL_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, as_int(p.groups, "groups")));
    DPL_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// Everything one cuDNN convolution call needs, for one problem.
struct Problem {
  ConvKind kind;
  int device;
  cudnnHandle_t handle;
  bool nhwc;
  DType dtype;
  cudnnMathType_t math;
  Shape x, w, y;
  Conv2dParams p;
};

cudnnMathType_t math_for(DType t) {
  if (t != kFloat32) return CUDNN_TENSOR_OP_MATH;
  return cuda_api::allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

// A result of cuDNN's search is usable when it ran and respects the math we asked for: a float32
// problem without TF32 must not come back with a tensor-op variant.
template <typename Perf>
bool usable(const Perf& r, const Problem& pr, bool deterministic) {
  if (r.status != CUDNN_STATUS_SUCCESS) return false;
  if (deterministic && r.determinism != CUDNN_DETERMINISTIC) return false;
  return !(pr.dtype == kFloat32 && pr.math == CUDNN_FMA_MATH && r.mathType != CUDNN_FMA_MATH);
}

struct Algo {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

std::string problem_key(const Problem& pr, bool benchmark) {
  std::ostringstream k;
  k << pr.device << ',' << static_cast<int>(pr.kind) << ',' << static_cast<int>(pr.dtype) << ',' << pr.nhwc << ','
    << static_cast<int>(pr.math) << ',' << benchmark;
  for (const Shape* s : {&pr.x, &pr.w, &pr.y})
    for (auto e : *s) k << ',' << e;
  for (int i = 0; i < 2; ++i) k << ';' << pr.p.stride[i] << ',' << pr.p.padding[i] << ',' << pr.p.dilation[i];
  k << ';' << pr.p.groups;
  return k.str();
}

std::size_t workspace_size(const Problem& pr, const TensorDesc& x, const FilterDesc& w, const ConvDesc& c,
                           const TensorDesc& y, int algo) {
  std::size_t n = 0;
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  switch (pr.kind) {
    case ConvKind::kForward:
      s = cudnnGetConvolutionForwardWorkspaceSize(pr.handle, x.d, w.d, c.d, y.d,
                                                  static_cast<cudnnConvolutionFwdAlgo_t>(algo), &n);
      break;
    case ConvKind::kBackwardData:
      s = cudnnGetConvolutionBackwardDataWorkspaceSize(pr.handle, w.d, y.d, c.d, x.d,
                                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &n);
      break;
    case ConvKind::kBackwardWeight:
      s = cudnnGetConvolutionBackwardFilterWorkspaceSize(pr.handle, x.d, y.d, c.d, w.d,
                                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &n);
      break;
  }
  return s == CUDNN_STATUS_SUCCESS ? n : 0;
}

// When no result is usable: implicit GEMM forward, and ALGO_1 backward (ALGO_0 of the backward
// kinds accumulates with atomics, so it is not deterministic), with the asked math.
Algo fallback_algo(const Problem& pr) { return {pr.kind == ConvKind::kForward ? 0 : 1, pr.math}; }

// Picks from a list of results (best first) the first usable one, else fallback_algo.
template <typename Perf>
Algo first_usable(const Perf* results, int n, const Problem& pr, bool deterministic) {
  for (int i = 0; i < n; ++i)
    if (usable(results[i], pr, deterministic)) return {static_cast<int>(results[i].algo), results[i].mathType};
  return fallback_algo(pr);
}

// Times cuDNN's candidates on scratch buffers, so the real output (beta 1 may need its contents)
// is never written by the search. The workspace offered is the largest any algorithm asks for,
// up to 1 GiB.
Algo benchmark_algo(const Problem& pr, const TensorDesc& x, const FilterDesc& w, const ConvDesc& c,
                    const TensorDesc& y, const void* a, const void* b) {
  constexpr std::size_t kMaxWorkspace = std::size_t{1} << 30;
  std::size_t ws = 0;
  for (int algo = 0; algo < 8; ++algo) {
    const std::size_t n = workspace_size(pr, x, w, c, y, algo);
    if (n <= kMaxWorkspace) ws = std::max(ws, n);
  }
  Workspace scratch(pr.device, ws);
  const Shape& out_shape = pr.kind == ConvKind::kForward ? pr.y : pr.kind == ConvKind::kBackwardData ? pr.x : pr.w;
  Workspace out(pr.device, static_cast<std::size_t>(shape_numel(out_shape)) * dtype_size(pr.dtype));
  constexpr int kCount = 8;
  int returned = 0;
  if (pr.kind == ConvKind::kForward) {
    cudnnConvolutionFwdAlgoPerf_t r[kCount];
    DPL_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(pr.handle, x.d, a, w.d, b, c.d, y.d, out.data(), kCount,
                                                           &returned, r, scratch.data(), scratch.size()));
    return first_usable(r, returned, pr, false);
  }
  if (pr.kind == ConvKind::kBackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t r[kCount];
    DPL_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(pr.handle, w.d, b, y.d, a, c.d, x.d, out.data(), kCount,
                                                                &returned, r, scratch.data(), scratch.size()));
    return first_usable(r, returned, pr, false);
  }
  cudnnConvolutionBwdFilterAlgoPerf_t r[kCount];
  DPL_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(pr.handle, x.d, a, y.d, b, c.d, w.d, out.data(), kCount,
                                                                &returned, r, scratch.data(), scratch.size()));
  return first_usable(r, returned, pr, false);
}

Algo heuristic_algo(const Problem& pr, const TensorDesc& x, const FilterDesc& w, const ConvDesc& c,
                    const TensorDesc& y) {
  constexpr int kCount = 8;
  int returned = 0;
  switch (pr.kind) {
    case ConvKind::kForward: {
      cudnnConvolutionFwdAlgoPerf_t r[kCount];
      DPL_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(pr.handle, x.d, w.d, c.d, y.d, kCount, &returned, r));
      return first_usable(r, returned, pr, true);
    }
    case ConvKind::kBackwardData: {
      cudnnConvolutionBwdDataAlgoPerf_t r[kCount];
      DPL_CUDNN_CHECK(
          cudnnGetConvolutionBackwardDataAlgorithm_v7(pr.handle, w.d, y.d, c.d, x.d, kCount, &returned, r));
      return first_usable(r, returned, pr, true);
    }
    case ConvKind::kBackwardWeight: {
      cudnnConvolutionBwdFilterAlgoPerf_t r[kCount];
      DPL_CUDNN_CHECK(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(pr.handle, x.d, y.d, c.d, w.d, kCount, &returned, r));
      return first_usable(r, returned, pr, true);
    }
  }
  return fallback_algo(pr);
}

Algo cached_algo(const Problem& pr, const TensorDesc& x, const FilterDesc& w, const ConvDesc& c, const TensorDesc& y,
                 const void* a, const void* b) {
  static const bool benchmark = settings().cudnn_benchmark;
  static std::mutex mutex;
  static std::unordered_map<std::string, Algo> cache;
  const std::string key = problem_key(pr, benchmark);
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  const Algo chosen = benchmark ? benchmark_algo(pr, x, w, c, y, a, b) : heuristic_algo(pr, x, w, c, y);
  std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(key, chosen).first->second;
}

// out = alpha*conv + beta*out, for (a, b) = (x, w) forward, (gy, w) backward data, (x, gy)
// backward weights; out is y, gx or gw.
void run(Problem pr, const Tensor& a, const Tensor& b, float beta, Tensor& out) {
  if (out.numel() == 0) return;
  DeviceGuard guard(pr.device);
  pr.handle = cudnn_handle(pr.device);
  pr.math = math_for(pr.dtype);
  const TensorDesc x(pr.x, pr.dtype, pr.nhwc), y(pr.y, pr.dtype, pr.nhwc);
  const FilterDesc w(pr.w, pr.dtype, pr.nhwc);
  const ConvDesc c(pr.p, pr.math);
  const Algo algo = cached_algo(pr, x, w, c, y, a.raw_data(), b.raw_data());
  DPL_CUDNN_CHECK(cudnnSetConvolutionMathType(c.d, algo.math));
  Workspace ws(pr.device, workspace_size(pr, x, w, c, y, algo.algo));
  const float alpha = 1.f;
  switch (pr.kind) {
    case ConvKind::kForward:
      DPL_CUDNN_CHECK(cudnnConvolutionForward(pr.handle, &alpha, x.d, a.raw_data(), w.d, b.raw_data(), c.d,
                                              static_cast<cudnnConvolutionFwdAlgo_t>(algo.algo), ws.data(),
                                              ws.size(), &beta, y.d, out.raw_data()));
      break;
    case ConvKind::kBackwardData:
      DPL_CUDNN_CHECK(cudnnConvolutionBackwardData(pr.handle, &alpha, w.d, b.raw_data(), y.d, a.raw_data(), c.d,
                                                   static_cast<cudnnConvolutionBwdDataAlgo_t>(algo.algo), ws.data(),
                                                   ws.size(), &beta, x.d, out.raw_data()));
      break;
    case ConvKind::kBackwardWeight:
      DPL_CUDNN_CHECK(cudnnConvolutionBackwardFilter(pr.handle, &alpha, x.d, a.raw_data(), y.d, b.raw_data(), c.d,
                                                     static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo.algo),
                                                     ws.data(), ws.size(), &beta, w.d, out.raw_data()));
      break;
  }
}

// --- bias -------------------------------------------------------------------------------------

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

void add_bias(const Tensor& bias, Tensor& y, bool nhwc) {
  cuda_detail::on_device_typed(y, "conv2d", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    const std::int64_t n = y.numel();
    const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((n + cuda_detail::kThreads - 1) / cuda_detail::kThreads, 4096));
    add_bias_kernel<T><<<blocks, cuda_detail::kThreads, 0, d.stream()>>>(
        cuda_detail::out_ptr<T>(y), cuda_detail::in_ptr<T>(bias), n, y.size(1), y.size(2) * y.size(3), nhwc);
    DPL_CUDA_CHECK(cudaGetLastError());
  });
}

void conv2d_forward_cuda(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv2dParams& p, Tensor& y) {
  const bool nhwc = channels_last(x);
  run({ConvKind::kForward, x.device().index, nullptr, nhwc, x.dtype(), CUDNN_DEFAULT_MATH, x.shape(), w.shape(),
       y.shape(), p},
      x, w, 0.f, y);
  if (bias != nullptr && y.numel() > 0) add_bias(*bias, y, nhwc);
}

void conv2d_backward_data_cuda(const Tensor& gy, const Tensor& w, const Conv2dParams& p, float beta, Tensor& gx) {
  run({ConvKind::kBackwardData, gx.device().index, nullptr, channels_last(gx), gx.dtype(), CUDNN_DEFAULT_MATH,
       gx.shape(), w.shape(), gy.shape(), p},
      gy, w, beta, gx);
}

void conv2d_backward_weight_cuda(const Tensor& x, const Tensor& gy, const Conv2dParams& p, float beta, Tensor& gw) {
  run({ConvKind::kBackwardWeight, x.device().index, nullptr, channels_last(x), x.dtype(), CUDNN_DEFAULT_MATH,
       x.shape(), gw.shape(), gy.shape(), p},
      x, gy, beta, gw);
}

void conv2d_backward_bias_cuda(const Tensor& gy, float beta, Tensor& gb) {
  if (gb.numel() == 0) return;
  cuda_detail::on_device_typed(gy, "conv2d backward (bias)", [&](auto tag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    bias_grad_kernel<T><<<static_cast<unsigned>(gb.numel()), cuda_detail::kThreads, 0, d.stream()>>>(
        cuda_detail::in_ptr<T>(gy), cuda_detail::out_ptr<T>(gb), gy.size(0), gy.size(1), gy.size(2) * gy.size(3),
        channels_last(gy), beta != 0.f);
    DPL_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace

DPL_REGISTER_KERNEL(conv2d_forward, kCuda, conv2d_forward_cuda);
DPL_REGISTER_KERNEL(conv2d_backward_data, kCuda, conv2d_backward_data_cuda);
DPL_REGISTER_KERNEL(conv2d_backward_weight, kCuda, conv2d_backward_weight_cuda);
DPL_REGISTER_KERNEL(conv2d_backward_bias, kCuda, conv2d_backward_bias_cuda);

}  // namespace dpl::backend
