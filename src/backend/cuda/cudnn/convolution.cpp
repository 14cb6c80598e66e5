// 2-D convolution on the GPU through cuDNN's graph (backend) API (the graph machinery that is not
// the convolution's own is graph_plan.hpp); the bias, added and differentiated by two small kernels
// of our own, is convolution_bias.cu.
//
// Why the graph API: on cuDNN 9 the legacy convolution calls (cudnnConvolutionForward and
// friends) no longer reach the Hopper tensor-core kernels for channels-last 16-bit data; they fall
// back to generic kernels several times slower. The graph API describes each tensor by its
// extents and strides (so NCHW and NHWC need no format flags) and lets cuDNN's heuristics offer
// every engine, the same route PyTorch takes.
//
// One execution plan per problem (device, kind, dtype, extents, strides, pointer alignment,
// geometry, beta, math, search mode), built on the problem's first call and kept. With
// DPL_CUDNN_BENCHMARK=1 (the default) that first call times the candidate plans on scratch
// buffers (a one-time host wait) and keeps the fastest, or one within DPL_CUDNN_WORKSPACE_SLACK
// (3%) of it with a smaller workspace; with 0 it takes the first deterministic
// plan of cuDNN's heuristics, so results repeat bit for bit. float32 data uses TF32 tensor cores
// only when dpl::cuda::allow_tf32() is on; every dtype accumulates in float32. Workspaces come
// from the device's caching allocator and every call is queued on the compute stream: after the
// first call of a problem, nothing waits on the host. With the search on, the forward pass and
// weight gradient of channels-last images with at most four channels (the RGB stem; 16-bit, or
// float32 where TF32 is allowed) may run on our own kernels instead (conv_few_channels.hpp), where
// they were faster on the first call.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cuda/conv_few_channels.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/cudnn/convolution_bias.hpp"
#if defined(DPL_HAVE_CUTLASS_SM90)
#include "backend/cuda/cutlass/conv1x1.hpp"
#endif
#include "backend/cuda/cudnn/cudnn_runtime.hpp"
#include "backend/cuda/cudnn/graph_plan.hpp"
#include "backend/cuda_api.hpp"
#include "backend/kernels.hpp"
#include "dpl/core/settings.hpp"

namespace dpl::backend {

namespace {

using cuda_detail::acceptable;
using cuda_detail::alignment_of;
using cuda_detail::cudnn_handle;
using cuda_detail::Descriptor;
using cuda_detail::DeviceGuard;
using cuda_detail::engine_configs;
using cuda_detail::finalize_plan;
using cuda_detail::Plan;
using cuda_detail::Workspace;

// kForwardSums: the forward convolution followed, in one graph, by cuDNN's generated statistics
// of its output (per-channel sum and sum of squares), which its fused engines compute in the
// convolution's epilogue.
enum class ConvKind { kForward, kBackwardData, kBackwardWeight, kForwardSums };

bool channels_last(const Tensor& image) { return image.memory_format() == MemoryFormat::kChannelsLast; }

// The unique ids that tie a graph's tensors to the pointers of a call.
constexpr std::int64_t kUidX = 1, kUidW = 2, kUidY = 3, kUidSum = 4, kUidSquares = 5;

// One operand: extents, strides and alignment. (The dtype is the problem's.)
struct Operand {
  Shape shape, strides;
  std::int64_t alignment = 16;
};

Operand operand_of(const Tensor& t) { return {t.shape(), t.strides(), alignment_of(t.raw_data())}; }

// Everything that decides which plan runs a call.
struct Problem {
  ConvKind kind;
  int device;
  DType dtype;
  Operand x, w, y;  // the image, the filter and the convolution's output, whatever the kind
  Conv2dParams p;
  float beta;
  bool tf32;
  bool benchmark;
};

std::string key_of(const Problem& pr) {
  std::ostringstream k;
  k << pr.device << ',' << static_cast<int>(pr.kind) << ',' << static_cast<int>(pr.dtype) << ',' << pr.beta << ','
    << pr.tf32 << ',' << pr.benchmark;
  for (const Operand* o : {&pr.x, &pr.w, &pr.y}) {
    k << '|' << o->alignment;
    for (auto e : o->shape) k << ',' << e;
    k << ':';
    for (auto e : o->strides) k << ',' << e;
  }
  for (int i = 0; i < 2; ++i) k << ';' << pr.p.stride[i] << ',' << pr.p.padding[i] << ',' << pr.p.dilation[i];
  k << ';' << pr.p.groups;
  return k.str();
}

Descriptor tensor_descriptor(std::int64_t uid, const Operand& o, DType dtype) {
  return cuda_detail::tensor_descriptor(uid, o.shape, o.strides, o.alignment, dtype);
}

Descriptor convolution_descriptor(const Conv2dParams& p) {
  Descriptor d(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const std::int64_t dims = 2;
  const std::int64_t dilation[2] = {p.dilation[0], p.dilation[1]};
  const std::int64_t stride[2] = {p.stride[0], p.stride[1]};
  const std::int64_t padding[2] = {p.padding[0], p.padding[1]};
  d.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &dims)
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dilation, 2)
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, stride, 2)
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, padding, 2)
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, padding, 2);
  d.finalize();
  return d;
}

// The attribute names of one kind's operation: (descriptor type, x, w, y, conv, alpha, beta).
struct OperationNames {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

OperationNames names_of(ConvKind kind) {
  switch (kind) {
    case ConvKind::kForward:
    case ConvKind::kForwardSums:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvKind::kBackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvKind::kBackwardWeight: break;
  }
  return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
}

// The operation graph of one problem: its three tensors, the convolution and the operation (and
// for kForwardSums the two statistics and the operation that generates them).
struct Graph {
  std::vector<Descriptor> parts;
  cudnnBackendDescriptor_t graph = nullptr;
};

Graph build_graph(const Problem& pr, cudnnHandle_t handle) {
  Graph g;
  g.parts.push_back(tensor_descriptor(kUidX, pr.x, pr.dtype));
  g.parts.push_back(tensor_descriptor(kUidW, pr.w, pr.dtype));
  g.parts.push_back(tensor_descriptor(kUidY, pr.y, pr.dtype));
  g.parts.push_back(convolution_descriptor(pr.p));
  const OperationNames n = names_of(pr.kind);
  Descriptor op(n.type);
  const float alpha = 1.f;
  op.set_descriptor(n.x, g.parts[0])
      .set_descriptor(n.w, g.parts[1])
      .set_descriptor(n.y, g.parts[2])
      .set_descriptor(n.conv, g.parts[3])
      .set(n.alpha, CUDNN_TYPE_FLOAT, &alpha)
      .set(n.beta, CUDNN_TYPE_FLOAT, &pr.beta);
  op.finalize();
  g.parts.push_back(std::move(op));
  std::vector<cudnnBackendDescriptor_t> ops{g.parts.back().get()};
  if (pr.kind == ConvKind::kForwardSums) {
    // Sum and sum of squares per channel of y: float32 (1, C, 1, 1).
    const std::int64_t c = pr.y.shape[1];
    const Shape shape{1, c, 1, 1};
    const Strides strides{c, 1, c, c};
    g.parts.push_back(cuda_detail::tensor_descriptor(kUidSum, shape, strides, 16, kFloat32));
    g.parts.push_back(cuda_detail::tensor_descriptor(kUidSquares, shape, strides, 16, kFloat32));
    const std::size_t sum_at = g.parts.size() - 2;
    Descriptor stats(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    stats.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, &mode)
        .set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &precision)
        .set_descriptor(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, g.parts[2])
        .set_descriptor(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, g.parts[sum_at])
        .set_descriptor(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, g.parts[sum_at + 1]);
    stats.finalize();
    g.parts.push_back(std::move(stats));
    ops.push_back(g.parts.back().get());
  }
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(),
            static_cast<std::int64_t>(ops.size()))
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle);
  graph.finalize();
  g.parts.push_back(std::move(graph));
  g.graph = g.parts.back().get();
  return g;
}

// Runs a plan on (x, w, y) pointers, and the statistics' (sum, sum of squares) for kForwardSums;
// false when cuDNN refuses to execute it.
bool execute(cudnnHandle_t handle, const Descriptor& plan, void* x, void* w, void* y, void* workspace,
             void* sum = nullptr, void* squares = nullptr) {
  void* pointers[5] = {x, w, y, sum, squares};
  const std::int64_t uids[5] = {kUidX, kUidW, kUidY, kUidSum, kUidSquares};
  return cuda_detail::execute(handle, plan, uids, pointers, sum != nullptr ? 5 : 3, workspace);
}

std::string describe(const Problem& pr) {
  std::ostringstream s;
  s << (pr.kind == ConvKind::kForward       ? "forward"
        : pr.kind == ConvKind::kForwardSums ? "forward with output statistics"
        : pr.kind == ConvKind::kBackwardData ? "input gradient"
                                             : "weight gradient")
    << " of a " << dtype_name(pr.dtype) << " convolution, input " << shape_str(pr.x.shape) << " strides "
    << shape_str(pr.x.strides) << ", weight " << shape_str(pr.w.shape) << " strides " << shape_str(pr.w.strides)
    << ", output " << shape_str(pr.y.shape) << " strides " << shape_str(pr.y.strides);
  return s.str();
}

// A start and a stop event for timing work on a stream, destroyed with the object.
struct TimingEvents {
  cudaEvent_t start = nullptr, stop = nullptr;
  TimingEvents() {
    DPL_CUDA_CHECK(cudaEventCreate(&start));
    DPL_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~TimingEvents() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  TimingEvents(const TimingEvents&) = delete;
  TimingEvents& operator=(const TimingEvents&) = delete;
};

// Milliseconds of three runs of `run` (which returns false when it could not run) on `stream`
// after one untimed warm-up run, or -1 when a run failed. Waits for the device.
template <typename Run>
float time_runs(cudaStream_t stream, const TimingEvents& events, Run&& run) {
  if (!run()) return -1.f;
  constexpr int kRuns = 3;
  DPL_CUDA_CHECK(cudaEventRecord(events.start, stream));
  bool ok = true;
  for (int r = 0; r < kRuns && ok; ++r) ok = run();
  DPL_CUDA_CHECK(cudaEventRecord(events.stop, stream));
  DPL_CUDA_CHECK(cudaEventSynchronize(events.stop));
  float ms = 0.f;
  DPL_CUDA_CHECK(cudaEventElapsedTime(&ms, events.start, events.stop));
  return ok ? ms : -1.f;
}

// The plan to use among the candidates, each timed on scratch buffers (so an output that is
// accumulated into is never touched by the search): of those within DPL_CUDNN_WORKSPACE_SLACK
// percent of the fastest (3 by default), the one with the smallest workspace, because a workspace
// lives beside the step's activations and a few percent of one convolution's time may not be worth
// hundreds of megabytes of peak memory.
// Candidates that need more than 1 GiB of workspace or fail to run are left out.
std::size_t fastest(const Problem& pr, cudnnHandle_t handle, const std::vector<Plan>& plans, const void* a,
                     const void* b, std::size_t out_bytes) {
  constexpr std::int64_t kMaxWorkspace = std::int64_t{1} << 30;
  std::int64_t ws = 0;
  for (const Plan& p : plans)
    if (p.workspace <= kMaxWorkspace) ws = std::max(ws, p.workspace);
  Workspace scratch(pr.device, static_cast<std::size_t>(ws));
  Workspace out(pr.device, out_bytes);
  const bool sums = pr.kind == ConvKind::kForwardSums;
  Workspace stats(pr.device, sums ? 2 * sizeof(float) * static_cast<std::size_t>(pr.y.shape[1]) : 0);
  void* sum = sums ? stats.data() : nullptr;
  void* squares = sums ? static_cast<float*>(stats.data()) + pr.y.shape[1] : nullptr;
  cudaStream_t stream = CudaDevice::get(pr.device).stream();
  const TimingEvents events;
  static const float nearly_fastest = 1.f + static_cast<float>(settings().cudnn_workspace_slack) / 100.f;
  std::vector<float> times(plans.size(), -1.f);  // < 0: not a candidate
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (plans[i].workspace > kMaxWorkspace) continue;
    void* x = const_cast<void*>(a);
    void* w = const_cast<void*>(b);
    void* y = out.data();
    if (pr.kind == ConvKind::kBackwardData) std::swap(x, y);  // (a, b, out) = (gy, w, gx)
    if (pr.kind == ConvKind::kBackwardWeight) std::swap(w, y);  // (a, b, out) = (x, gy, gw)
    times[i] = time_runs(stream, events,
                         [&] { return execute(handle, *plans[i].plan, x, w, y, scratch.data(), sum, squares); });
  }
  float fastest_ms = -1.f;
  for (float ms : times)
    if (ms >= 0.f && (fastest_ms < 0.f || ms < fastest_ms)) fastest_ms = ms;
  std::size_t best = plans.size();
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (times[i] < 0.f || times[i] > fastest_ms * nearly_fastest) continue;
    if (best == plans.size() || plans[i].workspace < plans[best].workspace ||
        (plans[i].workspace == plans[best].workspace && times[i] < times[best]))
      best = i;
  }
  // A failed launch in the search leaves an error behind; clear it so that it is not blamed on
  // the next kernel.
  cudaGetLastError();
  return best;
}

// Builds the plan of a problem: the first acceptable one of cuDNN's heuristics, or with the search
// on, the fastest of up to DPL_CUDNN_CANDIDATES (12) acceptable ones.
Plan build_plan(const Problem& pr, cudnnHandle_t handle, const void* a, const void* b, std::size_t out_bytes) {
  static const std::size_t candidates = static_cast<std::size_t>(settings().cudnn_candidates);
  Graph graph = build_graph(pr, handle);
  std::vector<Plan> plans;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (Descriptor& config : engine_configs(graph.graph, mode)) {
      if (plans.size() >= (pr.benchmark ? candidates : 1)) break;
      if (!acceptable(config, pr.dtype, pr.tf32, pr.benchmark)) continue;
      std::int64_t workspace = 0;
      std::unique_ptr<Descriptor> plan = finalize_plan(config, handle, &workspace);
      if (!plan) continue;
      Plan p;
      p.parts.push_back(std::move(config));
      p.plan = std::move(plan);
      p.workspace = workspace;
      plans.push_back(std::move(p));
    }
  }
  // A fused graph that no engine takes is an answer (the caller runs the plain convolution): an
  // empty plan, remembered as such.
  if (plans.empty() && pr.kind == ConvKind::kForwardSums) return Plan{};
  DPL_CHECK(!plans.empty(), "conv2d: cuDNN offers no engine for the ", describe(pr),
            "; expected one for 4-D tensors in NCHW or NHWC strides");
  std::size_t chosen = 0;
  if (pr.benchmark && plans.size() > 1) {
    chosen = fastest(pr, handle, plans, a, b, out_bytes);
    DPL_CHECK(chosen < plans.size(), "conv2d: none of cuDNN's ", plans.size(), " plans ran for the ", describe(pr));
  }
  Plan result = std::move(plans[chosen]);
  for (Descriptor& d : graph.parts) result.parts.push_back(std::move(d));
  return result;
}

const Plan& cached_plan(const Problem& pr, cudnnHandle_t handle, const void* a, const void* b,
                        std::size_t out_bytes) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::unique_ptr<Plan>> cache;
  const std::string key = key_of(pr);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    std::unique_ptr<Plan> plan;
    if (pr.kind == ConvKind::kForwardSums) {
      // cuDNN may refuse the fused graph while it is being described (a finalize that fails):
      // also an answer, not an error.
      try {
        plan = std::make_unique<Plan>(build_plan(pr, handle, a, b, out_bytes));
      } catch (const Error&) {
        cudaGetLastError();
        plan = std::make_unique<Plan>();
      }
    } else {
      plan = std::make_unique<Plan>(build_plan(pr, handle, a, b, out_bytes));
    }
    it = cache.emplace(key, std::move(plan)).first;
  }
  return *it->second;
}

// out = conv(...) + beta*out, for (a, b) = (x, w) forward, (gy, w) backward data, (x, gy)
// backward weights; out is y, gx or gw. kForwardSums also writes *sum and *squares, or returns
// false, having run nothing, where no engine fuses them.
bool run(ConvKind kind, const Tensor& a, const Tensor& b, const Conv2dParams& p, float beta, Tensor& out,
         Tensor* sum = nullptr, Tensor* squares = nullptr) {
  if (out.numel() == 0) return kind != ConvKind::kForwardSums;
  static const bool benchmark = settings().cudnn_benchmark;
  const int device = out.device().index;
  DeviceGuard guard(device);
  cudnnHandle_t handle = cudnn_handle(device);
  Problem pr{kind, device, out.dtype(), {}, {}, {}, p, beta, cuda_api::allow_tf32(), benchmark};
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;
  switch (kind) {
    case ConvKind::kForward:
    case ConvKind::kForwardSums:
      pr.x = operand_of(a), pr.w = operand_of(b), pr.y = operand_of(out);
      x = const_cast<void*>(a.raw_data()), w = const_cast<void*>(b.raw_data()), y = out.raw_data();
      break;
    case ConvKind::kBackwardData:
      pr.x = operand_of(out), pr.w = operand_of(b), pr.y = operand_of(a);
      x = out.raw_data(), w = const_cast<void*>(b.raw_data()), y = const_cast<void*>(a.raw_data());
      break;
    case ConvKind::kBackwardWeight:
      pr.x = operand_of(a), pr.w = operand_of(out), pr.y = operand_of(b);
      x = const_cast<void*>(a.raw_data()), w = out.raw_data(), y = const_cast<void*>(b.raw_data());
      break;
  }
  const std::size_t out_bytes = static_cast<std::size_t>(out.numel()) * dtype_size(out.dtype());
  const Plan& plan = cached_plan(pr, handle, a.raw_data(), b.raw_data(), out_bytes);
  if (!plan.plan) return false;  // only kForwardSums leaves a problem without a plan
  Workspace ws(device, static_cast<std::size_t>(plan.workspace));
  DPL_CHECK(execute(handle, *plan.plan, x, w, y, ws.data(), sum != nullptr ? sum->raw_data() : nullptr,
                    squares != nullptr ? squares->raw_data() : nullptr),
            "conv2d: cuDNN failed to run the plan chosen for the ", describe(pr));
  return true;
}

// Whether our kernels for images with few channels (conv_few_channels.hpp) run a forward or
// weight-gradient problem instead of cuDNN: with DPL_CUDNN_BENCHMARK on, whichever of the two was
// faster on the problem's first call, each timed on a scratch output (a gradient accumulated into
// must not be touched) after a warm-up run, in which cuDNN also picks its plan. They were written
// for the bfloat16 stem, where cuDNN is several times slower than in float16; for other shapes they
// take, the timing decides. Without the search, cuDNN (its deterministic plans). While a CUDA graph
// is being recorded nothing may wait for the device, so a problem not timed yet goes to cuDNN.
bool few_channels_kernels_win(ConvKind kind, const Tensor& a, const Tensor& b, const Conv2dParams& p, float beta,
                              Tensor& out) {
  static const bool benchmark = settings().cudnn_benchmark;
  if (!benchmark || out.numel() == 0) return false;
  const bool forward = kind == ConvKind::kForward;
  const Tensor& x = a;
  const Tensor& w = forward ? b : out;
  const Tensor& y = forward ? out : b;
  // Float32 runs on our kernels multiplied as TF32: only where TF32 is allowed.
  if (x.dtype() == kFloat32 && !cuda_api::allow_tf32()) return false;
  if (!cuda_detail::conv_few_channels_fits(x, w, p) || y.dtype() != x.dtype() || !y.is_channels_last() ||
      !cuda_detail::aligned16(y.raw_data()))
    return false;
  const int device = out.device().index;
  const Problem pr{kind, device, out.dtype(), operand_of(x), operand_of(w), operand_of(y), p, beta,
                   cuda_api::allow_tf32(), benchmark};
  const std::string key = key_of(pr);
  static std::mutex mutex;
  static std::unordered_map<std::string, bool> wins;
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = wins.find(key); it != wins.end()) return it->second;
  if (cuda_api::is_capturing(device)) return false;

  DeviceGuard guard(device);
  Tensor scratch = Tensor::empty_channels_last(out.shape(), TensorOptions(out.dtype(), out.device()));
  const cudaStream_t stream = CudaDevice::get(device).stream();
  const TimingEvents events;
  const float ours = time_runs(stream, events, [&] {
    if (forward) cuda_detail::conv_few_channels_forward(x, w, p, scratch);
    else cuda_detail::conv_few_channels_backward_weight(x, y, p, beta, scratch);
    return true;
  });
  const float cudnn = time_runs(stream, events, [&] { return run(kind, a, b, p, beta, scratch); });
  return wins.emplace(key, cudnn < 0.f || ours < cudnn).first->second;
}

void conv2d_forward_cuda(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv2dParams& p, Tensor& y) {
  if (few_channels_kernels_win(ConvKind::kForward, x, w, p, 0.f, y))
    cuda_detail::conv_few_channels_forward(x, w, p, y);
  else run(ConvKind::kForward, x, w, p, 0.f, y);
  if (bias != nullptr && y.numel() > 0) cuda_detail::add_conv_bias(*bias, y, channels_last(y));
}

bool conv2d_forward_sums_cuda(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& y, Tensor& sum,
                              Tensor& sum_of_squares) {
  DPL_CHECK(sum.dtype() == kFloat32 && sum_of_squares.dtype() == kFloat32 && sum.is_contiguous() &&
                sum_of_squares.is_contiguous() && sum.numel() == y.size(1) && sum_of_squares.numel() == y.size(1),
            "conv2d_forward_sums: expected contiguous float32 sums of ", y.size(1), " channels, got ", sum.dtype(),
            " ", shape_str(sum.shape()), " and ", sum_of_squares.dtype(), " ", shape_str(sum_of_squares.shape()));
#if defined(DPL_HAVE_CUTLASS_SM90)
  // 1x1 stride-1 convolutions in either 16-bit dtype, and in float32 while TF32 is allowed: a matrix
  // product with the sums in its epilogue.
  if (cuda_detail::conv1x1_forward_sums(x, w, p, y, sum, sum_of_squares)) return true;
  // Where that product runs, the other convolutions stay unfused: with cuDNN's engines taking the
  // float16 3x3 and strided ones beside it, a ResNet-50 step ran at 0.965x the separate passes'
  // on an H100 (docs/performance.md, "Fused statistics in every dtype").
  if (cuda_detail::conv1x1_cutlass_runs_on(x.device().index)) return false;
#endif
  // cuDNN's statistics-generating engines take channels-last images in one group. float16 only:
  // in bfloat16 a ResNet-18 step through them gave gradients 26-34% (relative L2) away from the
  // separate pass's while float16 agreed within 2e-2 (docs/performance.md, "Batch-norm statistics
  // in the convolution"); float32 finds no engine.
  if (x.dtype() != kFloat16 || !channels_last(x) || !channels_last(y) || p.groups != 1 || y.numel() == 0)
    return false;
  return run(ConvKind::kForwardSums, x, w, p, 0.f, y, &sum, &sum_of_squares);
}

bool conv2d_backward_data_masked_sums_cuda(const Tensor& gy, const Tensor& w, const Conv2dParams& p, const Tensor& y,
                                           const Tensor& x, const Tensor& mean, Tensor& g, Tensor& sum_g,
                                           Tensor& sum_gx) {
#if defined(DPL_HAVE_CUTLASS_SM90)
  return cuda_detail::conv1x1_backward_data_masked_sums(gy, w, p, y, x, mean, g, sum_g, sum_gx);
#else
  (void)gy, (void)w, (void)p, (void)y, (void)x, (void)mean, (void)g, (void)sum_g, (void)sum_gx;
  return false;
#endif
}

void conv2d_backward_data_cuda(const Tensor& gy, const Tensor& w, const Conv2dParams& p, float beta, Tensor& gx) {
  run(ConvKind::kBackwardData, gy, w, p, beta, gx);
}

void conv2d_backward_weight_cuda(const Tensor& x, const Tensor& gy, const Conv2dParams& p, float beta, Tensor& gw) {
  if (few_channels_kernels_win(ConvKind::kBackwardWeight, x, gy, p, beta, gw))
    cuda_detail::conv_few_channels_backward_weight(x, gy, p, beta, gw);
  else run(ConvKind::kBackwardWeight, x, gy, p, beta, gw);
}

}  // namespace

DPL_REGISTER_KERNEL(conv2d_forward, kCuda, conv2d_forward_cuda);
DPL_REGISTER_KERNEL(conv2d_forward_sums, kCuda, conv2d_forward_sums_cuda);
DPL_REGISTER_KERNEL(conv2d_backward_data, kCuda, conv2d_backward_data_cuda);
DPL_REGISTER_KERNEL(conv2d_backward_data_masked_sums, kCuda, conv2d_backward_data_masked_sums_cuda);
DPL_REGISTER_KERNEL(conv2d_backward_weight, kCuda, conv2d_backward_weight_cuda);

}  // namespace dpl::backend
