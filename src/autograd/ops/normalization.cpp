// Normalisation by each sample's own statistics: layer_norm and group_norm. Their kernels
// normalise groups of channels (backend::NormGroups); a layer norm is one group whose channels are
// the normalised elements.
#include "autograd/ops/support.hpp"

namespace dpl {

using namespace ops_detail;

namespace {

// weight or bias: undefined, or of `shape` on x's device, of x's dtype or float32 (see the header).
void check_affine(const char* op, const Variable& p, const char* what, const Shape& shape, const Tensor& x) {
  if (!p.defined()) return;
  const Tensor& t = p.data();
  DPL_CHECK(t.dtype() == x.dtype() || t.dtype() == kFloat32, op, ": expected ", what, " of the input's dtype ",
            x.dtype(), " or float32, got ", t.dtype());
  DPL_CHECK(t.shape() == shape, op, ": expected ", what, " of shape ", shape_str(shape), ", got ",
            shape_str(t.shape()));
  check_same_device(op, x, "an input", t, what);
}

// The kernels' affine parameter: p as float32 (channels,) elements, or `fill` when undefined.
Tensor affine_or(const Variable& p, std::int64_t channels, float fill, const Tensor& x) {
  if (!p.defined()) return Tensor::full({channels}, fill, TensorOptions(kFloat32, x.device()));
  const Tensor t = dense(p.data());
  return t.dtype() == kFloat32 ? t : t.to(kFloat32);
}

// target = beta*target + g for a float32 gradient g of the parameter's element count, rounded
// once to the parameter's dtype.
void accumulate_param(const Tensor& g, GradTarget& target) {
  const Tensor& dst = *target.tensor;
  backend::axpby(1.f, dst.dtype() == g.dtype() ? g : g.to(dst.dtype()), target.beta, *target.tensor);
}

class NormalizeGroupsNode final : public Node {
 public:
  const char* op = "";
  backend::NormGroups groups{};
  Tensor x, weight, mean, rstd;  // weight: the kernels' float32 one
  int weight_input = -1, bias_input = -1;  // positions among the inputs (-1: undefined)
  const char* name() const override { return op; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    const bool gw_needed = weight_input > 0 && t[weight_input].needed();
    const bool gb_needed = bias_input > 0 && t[bias_input].needed();
    const std::int64_t c = gw_needed || gb_needed ? groups.channels : 0;
    const TensorOptions f32(kFloat32, x.device());
    Tensor gw = Tensor::empty({c}, f32), gb = Tensor::empty({c}, f32);
    const Tensor g = dense(gy);
    const auto run = [&](float beta, Tensor& gx) {
      backend::normalize_groups_backward(groups, x, g, weight, mean, rstd, beta, gx, gw, gb);
    };
    if (t[0].needed()) {
      write_in(t[0], MemoryFormat::kContiguous, run);
    } else if (c > 0) {
      Tensor none = empty_on({0}, x);
      run(0.f, none);
    }
    if (gw_needed) accumulate_param(gw, t[weight_input]);
    if (gb_needed) accumulate_param(gb, t[bias_input]);
  }
  void release() override { x = weight = mean = rstd = Tensor(); }
};

// y = the groups of tx (x's data, dense and row-major) normalised; records the node when any of
// x, weight and bias requires a gradient. weight and bias are checked.
Variable normalize(const char* op, const Variable& x, const Tensor& tx, const backend::NormGroups& groups,
                   const Variable& weight, const Variable& bias, double eps) {
  const TensorOptions f32(kFloat32, tx.device());
  const Tensor w = affine_or(weight, groups.channels, 1.f, tx), b = affine_or(bias, groups.channels, 0.f, tx);
  Tensor y = empty_on(tx.shape(), tx);
  Tensor mean = Tensor::empty({groups.n * groups.groups}, f32), rstd = Tensor::empty({groups.n * groups.groups}, f32);
  backend::normalize_groups(groups, tx, w, b, static_cast<float>(eps), y, mean, rstd);
  if (!any_requires_grad({&x, &weight, &bias})) return Variable(y);
  auto node = std::make_shared<NormalizeGroupsNode>();
  node->op = op;
  node->groups = groups;
  node->x = tx;
  node->weight = w;
  node->mean = mean;
  node->rstd = rstd;
  node->weight_input = weight.defined() ? 1 : -1;
  node->bias_input = bias.defined() ? (weight.defined() ? 2 : 1) : -1;
  node->set_inputs(defined_inputs({&x, &weight, &bias}));
  return Variable::make_result(y, node);
}

}  // namespace

Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight, const Variable& bias,
                    double eps) {
  const char* op = "layer_norm";
  check_operands(op, {{x, "an input"}});
  const Tensor& t = x.data();
  const std::int64_t k = static_cast<std::int64_t>(normalized_shape.size());
  DPL_CHECK(k >= 1, op, ": expected a non-empty normalized_shape, got ()");
  std::int64_t d = 1;
  for (std::int64_t e : normalized_shape) {
    DPL_CHECK(e >= 1, op, ": expected a normalized_shape of extents >= 1, got ", shape_str(normalized_shape));
    d *= e;
  }
  DPL_CHECK(t.dim() >= k && Shape(t.shape().end() - k, t.shape().end()) == normalized_shape, op,
            ": expected an input whose last dimensions are normalized_shape ", shape_str(normalized_shape),
            ", got shape ", shape_str(t.shape()));
  DPL_CHECK(eps > 0.0, op, ": expected eps > 0, got ", eps);
  check_affine(op, weight, "a weight", normalized_shape, t);
  check_affine(op, bias, "a bias", normalized_shape, t);
  const Tensor tx = dense(t);
  return normalize(op, x, tx, backend::NormGroups{tx.numel() / d, d, 1, 1}, weight, bias, eps);
}

Variable group_norm(const Variable& x, std::int64_t num_groups, const Variable& weight, const Variable& bias,
                    double eps) {
  const char* op = "group_norm";
  check_operands(op, {{x, "an input"}});
  const Tensor& t = x.data();
  DPL_CHECK(t.dim() >= 2, op, ": expected an input (N, C, *) with at least 2 dimensions, got shape ",
            shape_str(t.shape()));
  const std::int64_t c = t.size(1);
  DPL_CHECK(num_groups >= 1 && c % num_groups == 0, op, ": expected num_groups >= 1 dividing the ", c,
            " channels of an input of shape ", shape_str(t.shape()), ", got ", num_groups);
  DPL_CHECK(eps > 0.0, op, ": expected eps > 0, got ", eps);
  check_affine(op, weight, "a weight", {c}, t);
  check_affine(op, bias, "a bias", {c}, t);
  std::int64_t inner = 1;
  for (std::int64_t d = 2; d < t.dim(); ++d) inner *= t.size(d);
  return normalize(op, x, dense(t), backend::NormGroups{t.size(0), c, inner, num_groups}, weight, bias, eps);
}

}  // namespace dpl
