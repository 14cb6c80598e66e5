// scaled_dot_product_attention: one kernel pair (backend::sdpa_forward, backend::sdpa_backward)
// that keeps per-row log-sum-exp statistics instead of the (Tq, Tk) probabilities, as flash
// attention does. q, k and v are read through their own strides; only an input whose last
// dimension is strided is copied. The output is laid out (B, Tq, H, Dv) (see below).
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

}  // namespace dpl
