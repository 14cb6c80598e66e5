// Indexing ops (dpl/autograd/ops/indexing.hpp): picking rows or elements by an index tensor.
// Their gradients are scatter-adds into the input's gradient (kernels index_add and scatter_add).
#include <optional>

#include "autograd/ops/support.hpp"

namespace dpl {

using namespace ops_detail;

namespace {

class IndexSelectNode final : public Node {
 public:
  Tensor index;
  std::int64_t dim = 0;
  std::int64_t skip = -1;
  const char* name_ = "index_select";
  const char* name() const override { return name_; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = dense(gy);
    write_in(t[0], MemoryFormat::kContiguous,
             [&](float beta, Tensor& gx) { backend::index_add(index, dim, skip, g, beta, gx); });
  }
  void release() override { index = Tensor(); }
};

class GatherNode final : public Node {
 public:
  Tensor index;
  std::int64_t dim = 0;
  const char* name() const override { return "gather"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = dense(gy);
    write_in(t[0], MemoryFormat::kContiguous,
             [&](float beta, Tensor& gx) { backend::scatter_add(index, dim, g, beta, gx); });
  }
  void release() override { index = Tensor(); }
};

// index checked (defined, int64 or int32, on x's device) and contiguous.
Tensor index_input(const char* op, const Tensor& index, const Tensor& x) {
  DPL_CHECK(index.defined(), op, ": expected an index tensor, got an undefined Tensor");
  DPL_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op, ": expected an index of dtype int64 or int32, got ",
            index.dtype());
  check_same_device(op, x, "the input", index, "the index");
  return index.contiguous();
}

// The index_select of x (checked) by a 1-D index, recorded with a backward that skips `skip`.
Variable select_rows(const char* op, const Variable& x, std::int64_t d, const Tensor& index, Shape out_shape,
                     std::int64_t skip) {
  const Tensor tx = dense(x.data());
  Tensor out = empty_on(out_shape, tx);
  Shape selected = tx.shape();
  selected[static_cast<std::size_t>(d)] = index.numel();
  Tensor out_selected = out.reshape(selected);
  backend::index_select(tx, d, index, out_selected);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<IndexSelectNode>();
  node->name_ = op;
  node->index = index;
  node->dim = d;
  node->skip = skip;
  node->set_inputs({x});
  return Variable::make_result(out, node);
}
}  // namespace

Variable index_select(const Variable& x, std::int64_t dim, const Tensor& index) {
  const char* op = "index_select";
  check_operands(op, {{x, "an input"}});
  const std::int64_t d = wrap_dim(op, dim, x.data().dim());
  const Tensor idx = index_input(op, index, x.data());
  DPL_CHECK(idx.dim() <= 1, op, ": expected a 1-D index, got shape ", shape_str(idx.shape()));
  Shape out_shape = x.shape();
  out_shape[static_cast<std::size_t>(d)] = idx.numel();
  return select_rows(op, x, d, idx, out_shape, -1);
}

Variable gather(const Variable& x, std::int64_t dim, const Tensor& index) {
  const char* op = "gather";
  check_operands(op, {{x, "an input"}});
  const Tensor& t = x.data();
  const std::int64_t d = wrap_dim(op, dim, t.dim());
  const Tensor idx = index_input(op, index, t);
  bool fits = idx.dim() == t.dim() && t.dim() <= 8;
  for (std::int64_t k = 0; fits && k < t.dim(); ++k) fits = k == d || idx.size(k) <= t.size(k);
  DPL_CHECK(fits, op, ": expected an index of ", t.dim(), " dimensions (at most 8) with extents no larger than ",
            shape_str(t.shape()), " except at dimension ", d, ", got shape ", shape_str(idx.shape()));
  const Tensor tx = dense(t);
  Tensor out = empty_on(idx.shape(), tx);
  backend::gather(tx, d, idx, out);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<GatherNode>();
  node->index = idx;
  node->dim = d;
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

Variable embedding(const Tensor& indices, const Variable& weight, std::optional<std::int64_t> padding_idx) {
  const char* op = "embedding";
  check_operands(op, {{weight, "a weight", 2, " (num_embeddings, embedding_dim)"}});
  const std::int64_t rows = weight.data().size(0);
  std::int64_t skip = -1;
  if (padding_idx) {
    DPL_CHECK(*padding_idx >= -rows && *padding_idx < rows, op, ": padding_idx ", *padding_idx,
              " is out of range for ", rows, " embeddings");
    skip = *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
  }
  const Tensor idx = index_input(op, indices, weight.data());
  Shape out_shape = idx.shape();
  out_shape.push_back(weight.data().size(1));
  return select_rows(op, weight, 0, idx.reshape({idx.numel()}), out_shape, skip);
}

}  // namespace dpl
