// scaled_dot_product_attention: one kernel pair (backend::sdpa_forward, backend::sdpa_backward)
// that keeps per-row log-sum-exp statistics instead of the (Tq, Tk) probabilities, as flash
// attention does. q, k and v are read through their own strides; only an input whose last
// dimension is strided is copied. The output is laid out (B, Tq, H, Dv) (see below). The packed
// form takes q, k and v as strided views of one projection and writes their gradients through
// the same views into one buffer.
#include <cmath>

#include "autograd/ops/support.hpp"

namespace dpl {

using namespace ops_detail;

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// t itself when its last dimension is contiguous (stride 1, or a single element), else a
// contiguous copy: the kernels read rows of the head dimension as runs of memory.
Tensor rows_contiguous(const Tensor& t) {
  return t.size(3) <= 1 || t.strides()[3] == 1 ? t : dense(t);
}

class AttentionNode final : public Node {
 public:
  backend::SdpaParams params;
  Tensor q, k, v, out, lse;
  const char* name() const override { return kOp; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    // The kernel writes the three gradients with one beta: straight into a target's buffer when
    // that is contiguous and takes the kernel's beta (the usual case: all fresh, or all
    // accumulating), else into a contiguous temporary that pass_into brings to the target.
    float beta = 0.f;
    for (const GradTarget& target : t)
      if (target.needed() && has_format(*target.tensor, MemoryFormat::kContiguous)) {
        beta = target.beta;
        break;
      }
    const Tensor* inputs[3] = {&q, &k, &v};
    Tensor temporary[3];
    Tensor* dst[3] = {};
    for (int i = 0; i < 3; ++i) {
      GradTarget& target = t[static_cast<std::size_t>(i)];
      if (target.needed() && has_format(*target.tensor, MemoryFormat::kContiguous) && target.beta == beta) {
        dst[i] = target.tensor;
        continue;
      }
      // beta 1 reads the old contents: a temporary then starts from zero.
      const TensorOptions o(q.dtype(), q.device());
      temporary[i] = beta == 0.f ? Tensor::empty(inputs[i]->shape(), o) : Tensor::zeros(inputs[i]->shape(), o);
      dst[i] = &temporary[i];
    }
    backend::sdpa_backward(params, q, k, v, out, rows_contiguous(gy), lse, beta, *dst[0], *dst[1], *dst[2]);
    for (int i = 0; i < 3; ++i) {
      GradTarget& target = t[static_cast<std::size_t>(i)];
      if (target.needed() && dst[i] == &temporary[i]) pass_into(temporary[i], target);
    }
  }
  void release() override { q = k = v = out = lse = Tensor(); }
};

constexpr const char* kPackedOp = "scaled_dot_product_attention_packed";

// Part `part` of `parts` of the rows of t (B, T, parts * H * D), contiguous, as a (B, H, T, D)
// view: strides (T * parts * H * D, D, parts * H * D, 1). Views only: nothing is recorded.
Tensor heads_view(const Tensor& t, std::int64_t parts, std::int64_t part, std::int64_t heads) {
  const std::int64_t B = t.size(0), T = t.size(1), D = t.size(2) / (parts * heads);
  const Tensor split = t.reshape({B, T, parts, heads, D}).narrow(2, part, 1);
  return permute(squeeze(Variable(split), 2), {0, 2, 1, 3}).data();
}

class PackedAttentionNode final : public Node {
 public:
  backend::SdpaParams params;
  std::int64_t heads = 1;
  Tensor qkv, out, lse;  // qkv contiguous (B, T, 3C), out (B, T, C)
  const char* name() const override { return kPackedOp; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    // The kernels write the three gradients through the views with beta 0, so a fresh contiguous
    // buffer takes them as they are; an accumulating one gets them through a temporary.
    const bool direct = t[0].beta == 0.f && t[0].tensor->is_contiguous();
    Tensor grad = direct ? *t[0].tensor : Tensor::empty_like(qkv);
    Tensor gq = heads_view(grad, 3, 0, heads), gk = heads_view(grad, 3, 1, heads), gv = heads_view(grad, 3, 2, heads);
    backend::sdpa_backward(params, heads_view(qkv, 3, 0, heads), heads_view(qkv, 3, 1, heads),
                           heads_view(qkv, 3, 2, heads), heads_view(out, 1, 0, heads),
                           heads_view(dense(gy), 1, 0, heads), lse, 0.f, gq, gk, gv);
    if (!direct) add_into(grad, t[0]);
  }
  void release() override { qkv = out = lse = Tensor(); }
};

}  // namespace

Variable scaled_dot_product_attention(const Variable& q, const Variable& k, const Variable& v, bool is_causal,
                                      std::optional<double> scale) {
  check_operands(kOp, {{q, "a query", 4, " (B, H, Tq, D)"},
                       {k, "a key", 4, " (B, H, Tk, D)"},
                       {v, "a value", 4, " (B, H, Tk, Dv)"}});
  const Shape& sq = q.data().shape();
  const Shape& sk = k.data().shape();
  const Shape& sv = v.data().shape();
  DPL_CHECK(sk[0] == sq[0] && sk[1] == sq[1], kOp, ": expected a key with the query's batch and heads (", sq[0], ", ",
            sq[1], "), got shape ", shape_str(sk));
  DPL_CHECK(sv[0] == sq[0] && sv[1] == sq[1], kOp, ": expected a value with the query's batch and heads (", sq[0],
            ", ", sq[1], "), got shape ", shape_str(sv));
  DPL_CHECK(sq[3] >= 1, kOp, ": expected a query with a head dimension D >= 1, got shape ", shape_str(sq));
  DPL_CHECK(sk[3] == sq[3], kOp, ": expected a key with the query's head dimension ", sq[3], ", got shape ",
            shape_str(sk));
  DPL_CHECK(sk[2] >= 1, kOp, ": expected a key with at least one position (Tk >= 1), got shape ", shape_str(sk));
  DPL_CHECK(sv[2] == sk[2], kOp, ": expected a value with the key's ", sk[2], " positions, got shape ",
            shape_str(sv));
  DPL_CHECK(sv[3] >= 1, kOp, ": expected a value with a head dimension Dv >= 1, got shape ", shape_str(sv));
  DPL_CHECK(!scale || std::isfinite(*scale), kOp, ": expected a finite scale, got ", scale.value_or(0.0));

  backend::SdpaParams p;
  p.causal = is_causal;
  p.scale = static_cast<float>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(sq[3])));
  const Tensor tq = rows_contiguous(q.data()), tk = rows_contiguous(k.data()), tv = rows_contiguous(v.data());
  // out (B, H, Tq, Dv) lies in memory as (B, Tq, H, Dv), as PyTorch's flash attention lays it: the
  // usual next step, transpose(1, 2) and merging the heads into rows of width H * Dv, is then a
  // view, not a copy, and out's gradient comes back in the same layout.
  Tensor out = transpose(Variable(empty_on({sq[0], sq[2], sq[1], sv[3]}, tq)), 1, 2).data();
  Tensor lse = Tensor::empty({sq[0], sq[1], sq[2]}, TensorOptions(kFloat32, tq.device()));
  backend::sdpa_forward(p, tq, tk, tv, out, lse);
  if (!any_requires_grad({&q, &k, &v})) return Variable(out);
  auto node = std::make_shared<AttentionNode>();
  node->params = p;
  node->q = tq;
  node->k = tk;
  node->v = tv;
  node->out = out;
  node->lse = lse;
  node->set_inputs({q, k, v});
  return Variable::make_result(out, node);
}

Variable scaled_dot_product_attention_packed(const Variable& qkv, std::int64_t heads, bool is_causal,
                                             std::optional<double> scale) {
  check_operands(kPackedOp, {{qkv, "a packed projection", 3, " (B, T, 3 * H * D)"}});
  const Shape& s = qkv.data().shape();
  DPL_CHECK(heads >= 1, kPackedOp, ": expected heads >= 1, got ", heads);
  DPL_CHECK(s[1] >= 1 && s[2] >= 3 * heads && s[2] % (3 * heads) == 0, kPackedOp,
            ": expected a projection (B, T, 3 * H * D) with T >= 1 and a last dimension that 3 * heads = ", 3 * heads,
            " divides, got shape ", shape_str(s));
  DPL_CHECK(!scale || std::isfinite(*scale), kPackedOp, ": expected a finite scale, got ", scale.value_or(0.0));
  const std::int64_t B = s[0], T = s[1], C = s[2] / 3;
  backend::SdpaParams p;
  p.causal = is_causal;
  p.scale = static_cast<float>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(C / heads)));
  const Tensor packed = dense(qkv.data());
  Tensor out = empty_on({B, T, C}, packed);
  Tensor lse = Tensor::empty({B, heads, T}, TensorOptions(kFloat32, packed.device()));
  Tensor out_heads = heads_view(out, 1, 0, heads);
  backend::sdpa_forward(p, heads_view(packed, 3, 0, heads), heads_view(packed, 3, 1, heads),
                        heads_view(packed, 3, 2, heads), out_heads, lse);
  if (!any_requires_grad({&qkv})) return Variable(out);
  auto node = std::make_shared<PackedAttentionNode>();
  node->params = p;
  node->heads = heads;
  node->qkv = packed;
  node->out = out;
  node->lse = lse;
  node->set_inputs({qkv});
  return Variable::make_result(out, node);
}

}  // namespace dpl
