// Scaled dot-product attention on cuDNN's fused flash-attention kernels, through cuDNN's
// header-only C++ frontend (cudnn_frontend::graph::Graph with sdpa and sdpa_backward). This file
// is compiled with the frontend's headers only where CMake found them (DPL_HAVE_CUDNN_FRONTEND,
// scripts/fetch_cudnn_frontend.sh); otherwise it installs nothing and every call runs on dpl's own
// kernels (backend/cuda/attention.cu), which also take whatever cuDNN refuses.
//
// What is offered to cuDNN: bfloat16 and float16 operands with head dimensions that are multiples
// of 8 up to 256, strides (of the inputs, outputs and gradients alike) that are positive multiples
// of 8 elements (the last one 1) and 16-byte aligned pointers; cuDNN's frontend decides the rest (check_support). Input and output are
// 16-bit, the softmax and the products' accumulation float32, and the forward graph returns the
// rows' log-sum-exp statistics (training mode), which are the plain kernels' too, so a forward
// pass on one path and its backward on the other agree.
//
// One graph per problem and direction (device, dtype, extents, strides, causal mask, scale), built
// on the problem's first call and kept, with the cuDNN handle and the workspaces of the other cuDNN
// kernels (cudnn_runtime.hpp). A problem the frontend refuses is remembered as refused: it is
// asked once, then runs on the plain kernels without a word.
#include "backend/cuda/attention.hpp"

#if defined(DPL_HAVE_CUDNN_FRONTEND)

// The standard headers, and the C libraries the frontend calls, come first: with their own
// visibility (the region below must not mark their functions hidden), and because the frontend's
// headers use <cstring> without including it once their JSON support is left out.
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nvrtc.h>

// The frontend's inline code stays inside libdpl: its symbols are hidden, so a program that links
// another version of the frontend neither interposes its definitions on ours nor gets ours.
#pragma GCC visibility push(hidden)
#include <cudnn_frontend.h>
#pragma GCC visibility pop

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/cudnn/cudnn_runtime.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

namespace {

namespace fe = cudnn_frontend;

using cuda_detail::cudnn_handle;
using cuda_detail::DeviceGuard;
using cuda_detail::Workspace;

// The unique ids that tie a graph's tensors to the pointers of a call.
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kGradO, kGradQ, kGradK, kGradV };

enum class Direction { kForward, kBackward };

// Everything a graph depends on.
struct Problem {
  Direction direction;
  int device;
  DType dtype;
  std::int64_t B, H, Tq, Tk, D, Dv;
  std::vector<std::int64_t> q_strides, k_strides, v_strides;
  bool causal;
  float scale;
  // The outputs' and out's gradient's strides: forward O; backward O, dO, dQ, dK, dV.
  std::vector<std::vector<std::int64_t>> io_strides;
};

std::string key_of(const Problem& pr) {
  std::uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &pr.scale, sizeof scale_bits);
  std::ostringstream k;
  k << static_cast<int>(pr.direction) << ',' << pr.device << ',' << static_cast<int>(pr.dtype) << ',' << pr.B << ','
    << pr.H << ',' << pr.Tq << ',' << pr.Tk << ',' << pr.D << ',' << pr.Dv << ',' << pr.causal << ',' << scale_bits;
  for (const auto* s : {&pr.q_strides, &pr.k_strides, &pr.v_strides}) {
    k << '|';
    for (std::int64_t e : *s) k << e << ',';
  }
  for (const auto& s : pr.io_strides) {
    k << '/';
    for (std::int64_t e : s) k << e << ',';
  }
  return k.str();
}

// The strides cuDNN is given for a (B, H, T, E) operand: its own, except that a dimension of
// extent 1 (whose stride nothing reads) gets the packed one, so that any stride there is accepted.
std::vector<std::int64_t> strides_of(const Tensor& t) {
  std::vector<std::int64_t> s(t.strides().begin(), t.strides().end());
  for (int d = 2; d >= 0; --d)
    if (t.size(d) == 1) s[static_cast<std::size_t>(d)] = s[static_cast<std::size_t>(d) + 1] * t.size(d + 1);
  return s;
}

// The strides of a packed (B, H, T, E) tensor.
std::vector<std::int64_t> packed(const std::vector<std::int64_t>& dim) {
  return {dim[1] * dim[2] * dim[3], dim[2] * dim[3], dim[3], 1};
}

bool aligned16(const Tensor& t) { return cuda_detail::aligned16(t.raw_data()); }

// Whether a (B, H, T, E) operand's layout is offered to cuDNN: 16-byte aligned, the last stride 1
// and the others positive multiples of 8 elements.
bool layout_offered(const Tensor& t) {
  if (!aligned16(t) || t.strides()[3] != 1) return false;
  const std::vector<std::int64_t> s = strides_of(t);
  for (int d = 0; d < 3; ++d)
    if (s[static_cast<std::size_t>(d)] <= 0 || s[static_cast<std::size_t>(d)] % 8 != 0) return false;
  return true;
}

// Whether the operands are of the kind offered to cuDNN (see the top of the file).
bool offered(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.dtype() != kBFloat16 && q.dtype() != kFloat16) return false;
  const std::int64_t D = q.size(3), Dv = v.size(3);
  if (D % 8 != 0 || Dv % 8 != 0 || D > 256 || Dv > 256) return false;
  return layout_offered(q) && layout_offered(k) && layout_offered(v);
}

// The problem of q, k, v with the strides of `io` (forward: out; backward: out, gout, gq, gk, gv);
// without io (the question whether cuDNN takes the inputs at all), those of packed tensors.
Problem problem_of(Direction direction, const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                   std::initializer_list<const Tensor*> io = {}) {
  Problem pr{direction,      q.device().index, q.dtype(),     q.size(0),     q.size(1),     q.size(2),
             k.size(2),      q.size(3),        v.size(3),     strides_of(q), strides_of(k), strides_of(v),
             p.causal,       p.scale,          {}};
  for (const Tensor* t : io) pr.io_strides.push_back(strides_of(*t));
  if (io.size() == 0) {
    const std::vector<std::int64_t> o = packed({pr.B, pr.H, pr.Tq, pr.Dv});
    if (direction == Direction::kForward) pr.io_strides = {o};
    else
      pr.io_strides = {o, o, packed({pr.B, pr.H, pr.Tq, pr.D}), packed({pr.B, pr.H, pr.Tk, pr.D}),
                       packed({pr.B, pr.H, pr.Tk, pr.Dv})};
  }
  return pr;
}

fe::DataType_t io_type(DType t) { return t == kBFloat16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF; }

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, std::int64_t uid,
                                                    std::vector<std::int64_t> dim,
                                                    std::vector<std::int64_t> stride) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(std::move(dim)).set_stride(
      std::move(stride)));
}

void as_output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, std::int64_t uid,
               std::vector<std::int64_t> dim, std::vector<std::int64_t> stride) {
  t->set_output(true).set_uid(uid).set_dim(std::move(dim)).set_stride(std::move(stride));
}

// The statistics (B, H, Tq, 1), float32, packed: the (B, H, Tq) lse of the kernels.
std::vector<std::int64_t> stats_dim(const Problem& pr) { return {pr.B, pr.H, pr.Tq, 1}; }
std::vector<std::int64_t> stats_stride(const Problem& pr) { return {pr.H * pr.Tq, pr.Tq, 1, 1}; }

// The graph of a problem, validated, supported and with its plan built; null when the frontend
// refuses any step.
std::shared_ptr<fe::graph::Graph> build_graph(const Problem& pr, cudnnHandle_t handle) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io_type(pr.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = input(*g, "Q", kQ, {pr.B, pr.H, pr.Tq, pr.D}, pr.q_strides);
  auto k = input(*g, "K", kK, {pr.B, pr.H, pr.Tk, pr.D}, pr.k_strides);
  auto v = input(*g, "V", kV, {pr.B, pr.H, pr.Tk, pr.Dv}, pr.v_strides);
  if (pr.direction == Direction::kForward) {
    auto attributes = fe::graph::SDPA_attributes()
                          .set_name("sdpa")
                          .set_generate_stats(true)
                          .set_attn_scale(pr.scale)
                          .set_causal_mask(pr.causal);
    auto [o, stats] = g->sdpa(q, k, v, attributes);
    as_output(o, kO, {pr.B, pr.H, pr.Tq, pr.Dv}, pr.io_strides[0]);
    stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dim(pr)).set_stride(
        stats_stride(pr));
  } else {
    const std::vector<std::int64_t> out_dim = {pr.B, pr.H, pr.Tq, pr.Dv};
    auto o = input(*g, "O", kO, out_dim, pr.io_strides[0]);
    auto go = input(*g, "dO", kGradO, out_dim, pr.io_strides[1]);
    auto stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("Stats")
                               .set_uid(kStats)
                               .set_dim(stats_dim(pr))
                               .set_stride(stats_stride(pr))
                               .set_data_type(fe::DataType_t::FLOAT));
    auto attributes = fe::graph::SDPA_backward_attributes()
                          .set_name("sdpa_backward")
                          .set_attn_scale(pr.scale)
                          .set_causal_mask(pr.causal);
    auto [gq, gk, gv] = g->sdpa_backward(q, k, v, o, go, stats, attributes);
    as_output(gq, kGradQ, {pr.B, pr.H, pr.Tq, pr.D}, pr.io_strides[2]);
    as_output(gk, kGradK, {pr.B, pr.H, pr.Tk, pr.D}, pr.io_strides[3]);
    as_output(gv, kGradV, {pr.B, pr.H, pr.Tk, pr.Dv}, pr.io_strides[4]);
  }
  if (!g->validate().is_good() || !g->build_operation_graph(handle).is_good() ||
      !g->create_execution_plans({fe::HeurMode_t::A}).is_good() || !g->check_support().is_good() ||
      !g->build_plans().is_good())
    return nullptr;
  return g;
}

// A problem's graph and its workspace bytes; graph null: refused.
struct Entry {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace = 0;
};

const Entry& cached(const Problem& pr) {
  static std::mutex mutex;
  static std::unordered_map<std::string, Entry> cache;
  const std::string key = key_of(pr);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Entry e;
  e.graph = build_graph(pr, cudnn_handle(pr.device));
  if (e.graph && !e.graph->get_workspace_size(e.workspace).is_good()) e.graph = nullptr;
  // A refused build may leave an error behind in the runtime; it is not the next kernel's.
  cudaGetLastError();
  return cache.emplace(key, std::move(e)).first->second;
}

void* ptr(const Tensor& t) { return const_cast<void*>(t.raw_data()); }

// Queues a built graph with its tensors' pointers on the device's compute stream.
void execute(const Problem& pr, const Entry& e, std::unordered_map<std::int64_t, void*>& pack) {
  Workspace ws(pr.device, static_cast<std::size_t>(e.workspace));
  fe::error_t status = e.graph->execute(cudnn_handle(pr.device), pack, ws.data());
  DPL_CHECK(status.is_good(), "scaled_dot_product_attention: cuDNN failed to run its ",
            pr.direction == Direction::kForward ? "forward" : "backward", " attention graph for q (", pr.B, ", ",
            pr.H, ", ", pr.Tq, ", ", pr.D, "), k (", pr.B, ", ", pr.H, ", ", pr.Tk, ", ", pr.D, "): ",
            status.get_message());
}

bool fused_forward(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                   Tensor& lse) {
  if (q.numel() == 0 || !offered(q, k, v) || !layout_offered(out) || !aligned16(lse)) return false;
  const Problem pr = problem_of(Direction::kForward, p, q, k, v, {&out});
  DeviceGuard guard(pr.device);
  const Entry& e = cached(pr);
  if (!e.graph) return false;
  std::unordered_map<std::int64_t, void*> pack = {
      {kQ, ptr(q)}, {kK, ptr(k)}, {kV, ptr(v)}, {kO, out.raw_data()}, {kStats, lse.raw_data()}};
  execute(pr, e, pack);
  return true;
}

bool fused_backward(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& gout, const Tensor& lse, float beta, Tensor& gq, Tensor& gk, Tensor& gv) {
  if (q.numel() == 0 || !offered(q, k, v) || !aligned16(lse)) return false;
  for (const Tensor* t : {&out, &gout, static_cast<const Tensor*>(&gq), static_cast<const Tensor*>(&gk),
                          static_cast<const Tensor*>(&gv)})
    if (!layout_offered(*t)) return false;
  // Accumulating gradients go through packed temporaries added afterwards, which needs packed ones.
  if (beta != 0.f && !(gq.is_contiguous() && gk.is_contiguous() && gv.is_contiguous())) return false;
  const Problem pr = problem_of(Direction::kBackward, p, q, k, v, {&out, &gout, &gq, &gk, &gv});
  DeviceGuard guard(pr.device);
  const Entry& e = cached(pr);
  if (!e.graph) return false;
  // cuDNN writes the gradients; accumulating ones go through temporaries added afterwards.
  Tensor tq, tk, tv;
  Tensor* dst[3] = {&gq, &gk, &gv};
  if (beta != 0.f) {
    tq = Tensor::empty(gq.shape(), TensorOptions(gq.dtype(), gq.device()));
    tk = Tensor::empty(gk.shape(), TensorOptions(gk.dtype(), gk.device()));
    tv = Tensor::empty(gv.shape(), TensorOptions(gv.dtype(), gv.device()));
    dst[0] = &tq;
    dst[1] = &tk;
    dst[2] = &tv;
  }
  std::unordered_map<std::int64_t, void*> pack = {
      {kQ, ptr(q)},           {kK, ptr(k)},          {kV, ptr(v)},
      {kO, ptr(out)},         {kGradO, ptr(gout)},   {kStats, ptr(lse)},
      {kGradQ, dst[0]->raw_data()}, {kGradK, dst[1]->raw_data()}, {kGradV, dst[2]->raw_data()}};
  execute(pr, e, pack);
  if (beta != 0.f) {
    axpby(1.f, tq, 1.f, gq);
    axpby(1.f, tk, 1.f, gk);
    axpby(1.f, tv, 1.f, gv);
  }
  return true;
}

bool fused_supports(const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.numel() == 0 || !offered(q, k, v)) return false;
  DeviceGuard guard(q.device().index);
  return cached(problem_of(Direction::kForward, p, q, k, v)).graph != nullptr &&
         cached(problem_of(Direction::kBackward, p, q, k, v)).graph != nullptr;
}

const bool installed [[maybe_unused]] =
    (cuda_detail::fused_attention() = cuda_detail::FusedAttention{&fused_forward, &fused_backward, &fused_supports},
     true);

}  // namespace

}  // namespace dpl::backend

#endif  // DPL_HAVE_CUDNN_FRONTEND
