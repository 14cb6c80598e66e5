// Reductions: sum and mean over all elements or over dimensions; max, min and argmax along a
// dimension; softmax, log_softmax and argmax over the last dimension (each leading index a row).
#include <algorithm>

#include "autograd/ops/broadcast.hpp"
#include "autograd/ops/support.hpp"

namespace dpl {

using namespace ops_detail;

namespace {

// --- sum / mean -------------------------------------------------------------------------------
class SumNode final : public Node {
 public:
  float scale = 1.f;
  bool average = false;
  const char* name() const override { return average ? "mean" : "sum"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) backend::fill_scaled(scale, gy, t[0].beta, *t[0].tensor);
  }
};

Variable reduce_all(const char* name, const Variable& x, bool average) {
  const Tensor tx = float_input(name, x);  // a sum reads memory order, whatever the format
  const float scale = average ? 1.f / static_cast<float>(std::max<std::int64_t>(tx.numel(), 1)) : 1.f;
  DPL_CHECK(!average || tx.numel() > 0, name, ": expected a non-empty input, got shape ", shape_str(tx.shape()));
  Tensor out = empty_on({}, tx);
  backend::sum_all(scale, tx, out);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<SumNode>();
  node->scale = scale;
  node->average = average;
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

// --- softmax / log_softmax --------------------------------------------------------------------
class SoftmaxNode final : public Node {
 public:
  bool log = false;
  Tensor y;
  const char* name() const override { return log ? "log_softmax" : "softmax"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = dense(gy);
    write_in(t[0], MemoryFormat::kContiguous,
             [&](float beta, Tensor& gx) { backend::softmax_backward(log, y, g, beta, gx); });
  }
  void release() override { y = Tensor(); }
};

Variable softmax_over_rows(const char* op, bool log, const Variable& x) {
  const Tensor tx = dense(float_input(op, x));  // rows: the last logical extent innermost
  DPL_CHECK(tx.dim() >= 1, op, ": expected an input with at least 1 dimension, got shape ", shape_str(tx.shape()));
  Tensor out = Tensor::empty_like(tx);
  backend::softmax(log, tx, out);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<SoftmaxNode>();
  node->log = log;
  node->y = out;
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

// --- along dimensions ---------------------------------------------------------------------------

// d in [-rank, rank) as an index in [0, rank); throws naming op and x's shape otherwise.
std::int64_t wrap_dim(const char* op, std::int64_t d, const Tensor& x) {
  const std::int64_t rank = std::max<std::int64_t>(x.dim(), 1);  // a 0-d tensor takes dim 0 or -1, as PyTorch
  DPL_CHECK(d >= -rank && d < rank, op, ": expected a dimension in [", -rank, ", ", rank, ") for an input of shape ",
            shape_str(x.shape()), ", got ", d);
  return d < 0 ? d + rank : d;
}

// x's shape without the dimensions marked (or with them as 1 when keepdim).
Shape reduced_shape(const Shape& s, const std::vector<bool>& reduced, bool keepdim) {
  Shape out;
  for (std::size_t d = 0; d < s.size(); ++d) {
    if (!reduced[d]) out.push_back(s[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// The gradient of a sum over dimensions: alpha * gy broadcast back over them, in one pass
// (reduce_dim_backward when one run of dimensions was reduced, binary's broadcast otherwise).
class SumDimsNode final : public Node {
 public:
  bool average = false;
  float alpha = 1.f;
  Shape keep_shape;                          // the input's shape with the reduced dimensions as 1
  std::int64_t outer = 0, n = 0, inner = 0;  // the one run's view; n == 0 when there are several runs
  const char* name() const override { return average ? "mean" : "sum"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = dense(gy);
    write_in(t[0], MemoryFormat::kContiguous, [&](float beta, Tensor& gx) {
      if (n > 0) {
        Tensor gx3 = gx.reshape({outer, n, inner});
        backend::reduce_dim_backward(backend::ReduceKind::kSum, alpha, g.reshape({outer, inner}), nullptr, beta, gx3);
        return;
      }
      const Tensor scale = Tensor::full(Shape(keep_shape.size(), 1), alpha, TensorOptions(g.dtype(), g.device()));
      backend::binary(backend::BinaryOp::kMul, backend::Broadcast::kShape, g.reshape(keep_shape), scale, beta, gx);
    });
  }
};

Variable reduce_dims(const char* op, const Variable& x, const std::vector<std::int64_t>& dims, bool keepdim,
                     bool average) {
  const Tensor tx = dense(float_input(op, x));
  const std::size_t rank = tx.shape().size();
  std::vector<bool> reduced(rank, dims.empty());  // no dimensions: all of them, as PyTorch
  for (std::int64_t d : dims) {
    const auto w = static_cast<std::size_t>(wrap_dim(op, d, tx));
    if (rank == 0) continue;
    DPL_CHECK(!reduced[w], op, ": dimension ", d, " appears more than once in the dimensions to reduce");
    reduced[w] = true;
  }
  std::int64_t count = 1;
  for (std::size_t d = 0; d < rank; ++d)
    if (reduced[d]) count *= tx.shape()[d];
  DPL_CHECK(!average || count > 0, op, ": expected non-empty dimensions to average over, got shape ",
            shape_str(tx.shape()));
  const float alpha = average ? 1.f / static_cast<float>(count) : 1.f;
  const Tensor kept = sum_dims_keep(tx, reduced, alpha);
  const Tensor out = kept.reshape(reduced_shape(tx.shape(), reduced, keepdim));
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<SumDimsNode>();
  node->average = average;
  node->alpha = alpha;
  node->keep_shape = kept.shape();
  // One run of reduced dimensions: the gradient is a plain (outer, n, inner) broadcast.
  std::size_t first = rank, last = 0, runs = 0;
  for (std::size_t d = 0; d < rank; ++d) {
    if (!reduced[d]) continue;
    if (d == 0 || !reduced[d - 1]) ++runs;
    first = std::min(first, d);
    last = d;
  }
  if (runs == 1) {
    node->outer = node->n = node->inner = 1;
    for (std::size_t d = 0; d < rank; ++d)
      (d < first ? node->outer : d <= last ? node->n : node->inner) *= tx.shape()[d];
  }
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

// --- max / min / argmax along a dimension -------------------------------------------------------
class ExtremumNode final : public Node {
 public:
  backend::ReduceKind kind = backend::ReduceKind::kMax;
  Tensor indices;  // (outer, inner)
  std::int64_t outer = 0, n = 0, inner = 0;
  const char* name() const override { return kind == backend::ReduceKind::kMax ? "max" : "min"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = dense(gy).reshape({outer, inner});
    write_in(t[0], MemoryFormat::kContiguous, [&](float beta, Tensor& gx) {
      Tensor gx3 = gx.reshape({outer, n, inner});
      backend::reduce_dim_backward(kind, 1.f, g, &indices, beta, gx3);
    });
  }
  void release() override { indices = Tensor(); }
};

ValuesIndices extremum(const char* op, backend::ReduceKind kind, const Variable& x, std::int64_t dim, bool keepdim,
                       bool want_grad = true) {
  const Tensor tx = dense(float_input(op, x));
  const std::int64_t d = wrap_dim(op, dim, tx);
  const Shape& s = tx.shape();
  const std::int64_t n = tx.dim() == 0 ? 1 : s[static_cast<std::size_t>(d)];
  DPL_CHECK(n > 0, op, ": expected a non-empty dimension ", dim, " to reduce, got shape ", shape_str(s));
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t k = 0; k < tx.dim(); ++k) (k < d ? outer : inner) *= k == d ? 1 : s[static_cast<std::size_t>(k)];
  std::vector<bool> reduced(s.size(), false);
  if (!s.empty()) reduced[static_cast<std::size_t>(d)] = true;
  const Shape out_shape = reduced_shape(s, reduced, keepdim);
  Tensor values = empty_on({outer, inner}, tx);
  Tensor indices = Tensor::empty({outer, inner}, TensorOptions(kInt64, tx.device()));
  backend::reduce_dim(kind, 1.f, tx.reshape({outer, n, inner}), values, &indices);
  ValuesIndices r{Variable(values.reshape(out_shape)), indices.reshape(out_shape)};
  if (!want_grad || !any_requires_grad({&x})) return r;
  auto node = std::make_shared<ExtremumNode>();
  node->kind = kind;
  node->indices = indices;
  node->outer = outer;
  node->n = n;
  node->inner = inner;
  node->set_inputs({x});
  r.values = Variable::make_result(values.reshape(out_shape), node);
  return r;
}

}  // namespace

Variable sum(const Variable& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  return reduce_dims("sum", x, dims, keepdim, false);
}
Variable mean(const Variable& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  return reduce_dims("mean", x, dims, keepdim, true);
}
ValuesIndices max(const Variable& x, std::int64_t dim, bool keepdim) {
  return extremum("max", backend::ReduceKind::kMax, x, dim, keepdim);
}
ValuesIndices min(const Variable& x, std::int64_t dim, bool keepdim) {
  return extremum("min", backend::ReduceKind::kMin, x, dim, keepdim);
}
Tensor argmax(const Variable& x, std::int64_t dim, bool keepdim) {
  return extremum("argmax", backend::ReduceKind::kMax, x, dim, keepdim, false).indices;
}
Tensor argmin(const Variable& x, std::int64_t dim, bool keepdim) {
  return extremum("argmin", backend::ReduceKind::kMin, x, dim, keepdim, false).indices;
}

Variable sum(const Variable& x) { return reduce_all("sum", x, false); }
Variable mean(const Variable& x) { return reduce_all("mean", x, true); }

Variable softmax(const Variable& x) { return softmax_over_rows("softmax", false, x); }
Variable log_softmax(const Variable& x) { return softmax_over_rows("log_softmax", true, x); }

Tensor argmax(const Variable& x) {
  const char* op = "argmax";
  const Tensor tx = float_input(op, x);
  DPL_CHECK(tx.dim() >= 1 && tx.size(-1) > 0, op,
            ": expected an input with at least 1 dimension and a non-empty last one, got shape ", shape_str(tx.shape()));
  Shape rows = tx.shape();
  rows.pop_back();
  Tensor out = Tensor::empty(rows, TensorOptions(kInt64, tx.device()));
  backend::argmax(tx, out);
  return out;
}

}  // namespace dpl
