// Shape ops (dpl/autograd/ops/shape.hpp): views of the same storage, joins, splits and padding.
//
// A view's node writes its gradient back through the same view: the op's view function is
// applied again to the input's gradient buffer (or to a scratch tensor of the input's shape), and
// the output gradient is copied into it. A view that covers every input element once (transpose,
// permute, squeeze) then leaves nothing to clear; one that covers a part (narrow, slice, split)
// zeroes the rest first when it overwrites.
#include <algorithm>
#include <array>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "autograd/ops/support.hpp"

namespace dpl {

using namespace ops_detail;

namespace {

// --- geometry ---------------------------------------------------------------------------------


Tensor view_of(const Tensor& t, std::int64_t offset, Shape shape, Strides strides) {
  return Tensor(t.storage(), offset, std::move(shape), std::move(strides), t.dtype());
}

// `shape` with its one -1 replaced so that it holds numel elements; refuses what cannot.
Shape infer_shape(const char* op, const Shape& in, const Shape& shape) {
  const std::int64_t numel = shape_numel(in);
  Shape out = shape;
  std::int64_t known = 1, infer = -1;
  for (std::size_t d = 0; d < out.size(); ++d) {
    if (out[d] == -1) {
      DPL_CHECK(infer < 0, op, ": only one extent may be -1, got ", shape_str(shape));
      infer = static_cast<std::int64_t>(d);
    } else {
      DPL_CHECK(out[d] >= 0, op, ": expected extents >= 0 (or one -1), got ", shape_str(shape));
      known *= out[d];
    }
  }
  if (infer >= 0) {
    DPL_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape), " is invalid for input of shape ",
              shape_str(in), " (", numel, " elements)");
    out[static_cast<std::size_t>(infer)] = numel / known;
  }
  DPL_CHECK(shape_numel(out) == numel, op, ": shape ", shape_str(shape), " is invalid for input of shape ",
            shape_str(in), " (", numel, " elements)");
  return out;
}

// The strides that view a tensor of (shape, strides) as `target` (same element count), or
// nothing when its memory does not allow it: each run of target dimensions must fall within a
// run of input dimensions that are contiguous with each other (PyTorch's computeStride).
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides, const Shape& target) {
  if (shape_numel(shape) == 0 || shape.empty()) return contiguous_strides(target);
  Strides out(target.size(), 1);
  auto view_d = static_cast<std::int64_t>(target.size()) - 1;
  std::int64_t chunk_base_stride = strides.back(), tensor_numel = 1, view_numel = 1;
  for (auto d = static_cast<std::int64_t>(shape.size()) - 1; d >= 0; --d) {
    const auto ud = static_cast<std::size_t>(d);
    tensor_numel *= shape[ud];
    if (d == 0 || (shape[ud - 1] != 1 && strides[ud - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || target[static_cast<std::size_t>(view_d)] == 1)) {
        out[static_cast<std::size_t>(view_d)] = view_numel * chunk_base_stride;
        view_numel *= target[static_cast<std::size_t>(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[ud - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Tensor permuted(const Tensor& t, const std::vector<std::int64_t>& dims) {
  Shape s(dims.size());
  Strides st(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    s[i] = t.shape()[static_cast<std::size_t>(dims[i])];
    st[i] = t.strides()[static_cast<std::size_t>(dims[i])];
  }
  return view_of(t, t.offset(), s, st);
}

// t's elements start, start + step, ... (count of them) along dimension d.
Tensor sliced(const Tensor& t, std::int64_t d, std::int64_t start, std::int64_t count, std::int64_t step) {
  Shape s = t.shape();
  Strides st = t.strides();
  const auto ud = static_cast<std::size_t>(d);
  const std::int64_t offset = t.offset() + (count > 0 ? start * st[ud] : 0);
  s[ud] = count;
  st[ud] *= step;
  return view_of(t, offset, s, st);
}

// --- nodes ------------------------------------------------------------------------------------

// Maps a tensor of the input's shape (any strides) to the op's view of it.
using ViewFn = std::function<Tensor(const Tensor&)>;

// t = beta*t + the gradient of a view: gy written through `view` into a tensor of the input's
// shape. `covers_all`: the view holds every input element once, so nothing else needs clearing.
void write_through_view(const ViewFn& view, bool covers_all, const Tensor& gy, GradTarget& t) {
  Tensor& buffer = *t.tensor;
  if (t.beta == 0.f) {
    if (!covers_all) buffer.fill_(0.0);
    view(buffer).copy_(gy);
    return;
  }
  Tensor region = view(buffer);
  Tensor sum = region.contiguous();
  backend::axpby(1.f, dense(gy), 1.f, sum);
  if (!sum.shares_storage_with(region)) region.copy_(sum);
}

class ViewNode final : public Node {
 public:
  ViewNode(const char* name, ViewFn view, bool covers_all)
      : name_(name), view_(std::move(view)), covers_all_(covers_all) {}
  const char* name() const override { return name_; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) write_through_view(view_, covers_all_, gy, t[0]);
  }

 private:
  const char* name_;
  ViewFn view_;
  bool covers_all_;
};

// x's view through `view`, recorded for backward when x requires a gradient.
Variable make_view(const char* name, const Variable& x, ViewFn view, bool covers_all) {
  DPL_CHECK(x.defined(), name, ": expected an input, got an undefined Variable");
  Tensor out = view(x.data());
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<ViewNode>(name, std::move(view), covers_all);
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

class ReshapeNode final : public Node {
 public:
  Shape in_shape;
  const char* name() const override { return "reshape"; }
  // The input's gradient is usually the output's, reshaped: hand it over without a buffer first.
  bool adopts_gradient_buffers() const override { return true; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) pass_into(dense(gy).reshape(in_shape), t[0]);
  }
};

// out, x's elements in row-major order in another shape (a view or a copy), recorded for backward.
Variable recorded_reshape(const Variable& x, const Tensor& out) {
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<ReshapeNode>();
  node->in_shape = x.shape();
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

// x with `shape` as a view, or (allow_copy) a copy when no view exists.
Variable reshaped(const char* op, const Variable& x, const Shape& shape, bool allow_copy) {
  DPL_CHECK(x.defined(), op, ": expected an input, got an undefined Variable");
  const Tensor& t = x.data();
  const Shape target = infer_shape(op, t.shape(), shape);
  Tensor out;
  if (const std::optional<Strides> st = view_strides(t.shape(), t.strides(), target)) {
    out = view_of(t, t.offset(), target, *st);
  } else {
    DPL_CHECK(allow_copy, op, ": cannot view a tensor of shape ", shape_str(t.shape()), " and strides ",
              shape_str(t.strides()), " as shape ", shape_str(target),
              ": its memory is not laid out for it; use reshape (which copies when it must) or call "
              "contiguous first");
    out = t.contiguous().reshape(target);
  }
  return recorded_reshape(x, out);
}

class ExpandNode final : public Node {
 public:
  Shape in_shape;
  const char* name() const override { return "expand"; }
  // Sums gy over the repeated dimensions: those are moved to the front, and one row sum over
  // them leaves the input's elements in order.
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = dense(gy);
    const std::int64_t lead = g.dim() - static_cast<std::int64_t>(in_shape.size());
    std::vector<std::int64_t> order, kept;
    std::int64_t repeats = 1;
    for (std::int64_t d = 0; d < g.dim(); ++d) {
      const bool repeated = d < lead || (in_shape[static_cast<std::size_t>(d - lead)] == 1 && g.size(d) != 1);
      (repeated ? order : kept).push_back(d);
      if (repeated) repeats *= g.size(d);
    }
    if (repeats == 1) return pass_into(g.reshape(in_shape), t[0]);
    order.insert(order.end(), kept.begin(), kept.end());
    const std::int64_t n = shape_numel(in_shape);
    const Tensor rows = permuted(g, order).contiguous().reshape({repeats, n});
    write_in(t[0], MemoryFormat::kContiguous, [&](float beta, Tensor& gx) {
      Tensor flat = gx.reshape({n});
      backend::sum_rows(1.f, rows, beta, flat);
    });
  }
};

class CatNode final : public Node {
 public:
  std::int64_t dim = 0;
  std::vector<std::int64_t> starts, lengths;
  const char* name() const override { return "cat"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    for (std::size_t i = 0; i < t.size(); ++i)
      if (t[i].needed()) add_into(sliced(gy, dim, starts[i], lengths[i], 1), t[i]);
  }
};

// Where each side of a constant pad lands: `src` is the part of x that is kept (cropped by
// negative pads), `dst` where it goes in the output (inside positive pads).
struct PadRegions {
  ViewFn src, dst;
  bool crops = false;
};

class PadNode final : public Node {
 public:
  PadRegions regions;
  const char* name() const override { return "pad"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (t[0].needed()) write_through_view(regions.src, !regions.crops, regions.dst(gy), t[0]);
  }
};

}  // namespace

// --- views and copies of one input --------------------------------------------------------------

Variable reshape(const Variable& x, const Shape& shape) { return reshaped("reshape", x, shape, true); }

Variable view(const Variable& x, const Shape& shape) { return reshaped("view", x, shape, false); }

Variable flatten(const Variable& x, std::int64_t start_dim) {
  DPL_CHECK(x.defined(), "flatten: expected an input, got an undefined Variable");
  const Shape& s = x.shape();
  const std::int64_t d = wrap_dim("flatten", start_dim, std::max<std::int64_t>(x.data().dim(), 1));
  Shape target(s.begin(), s.begin() + std::min<std::int64_t>(d, static_cast<std::int64_t>(s.size())));
  target.push_back(-1);
  return reshape(x, target);
}

Variable transpose(const Variable& x, std::int64_t d0, std::int64_t d1) {
  DPL_CHECK(x.defined(), "transpose: expected an input, got an undefined Variable");
  const std::int64_t rank = x.data().dim();
  std::vector<std::int64_t> dims(static_cast<std::size_t>(rank));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[static_cast<std::size_t>(wrap_dim("transpose", d0, rank))],
            dims[static_cast<std::size_t>(wrap_dim("transpose", d1, rank))]);
  return make_view("transpose", x, [dims](const Tensor& t) { return permuted(t, dims); }, true);
}

Variable permute(const Variable& x, const std::vector<std::int64_t>& dims) {
  DPL_CHECK(x.defined(), "permute: expected an input, got an undefined Variable");
  const std::int64_t rank = x.data().dim();
  DPL_CHECK(static_cast<std::int64_t>(dims.size()) == rank, "permute: expected ", rank,
            " dimensions for a tensor of shape ", shape_str(x.shape()), ", got ", shape_str(dims));
  std::vector<std::int64_t> order(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    order[i] = wrap_dim("permute", dims[i], rank);
    DPL_CHECK(!seen[static_cast<std::size_t>(order[i])], "permute: dimension ", dims[i], " appears twice in ",
              shape_str(dims));
    seen[static_cast<std::size_t>(order[i])] = true;
  }
  return make_view("permute", x, [order](const Tensor& t) { return permuted(t, order); }, true);
}

namespace {
// x without the dimensions for which drop(d) holds (each of extent 1).
// Recorded as a reshape (the elements keep their order), so that its gradient passes through
// without a copy.
template <typename Drop>
Variable squeezed(const Variable& x, Drop drop) {
  DPL_CHECK(x.defined(), "squeeze: expected an input, got an undefined Variable");
  const Tensor& t = x.data();
  Shape s;
  Strides st;
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    if (drop(d, t.size(d))) continue;
    s.push_back(t.size(d));
    st.push_back(t.strides()[static_cast<std::size_t>(d)]);
  }
  return recorded_reshape(x, view_of(t, t.offset(), s, st));
}
}  // namespace

Variable squeeze(const Variable& x) {
  return squeezed(x, [](std::int64_t, std::int64_t extent) { return extent == 1; });
}

Variable squeeze(const Variable& x, std::int64_t dim) {
  DPL_CHECK(x.defined(), "squeeze: expected an input, got an undefined Variable");
  const std::int64_t d = wrap_dim("squeeze", dim, x.data().dim());
  return squeezed(x, [d](std::int64_t k, std::int64_t extent) { return k == d && extent == 1; });
}

Variable unsqueeze(const Variable& x, std::int64_t dim) {
  DPL_CHECK(x.defined(), "unsqueeze: expected an input, got an undefined Variable");
  const std::int64_t d = wrap_dim("unsqueeze", dim, x.data().dim() + 1);
  const Tensor& t = x.data();
  Shape s = t.shape();
  Strides st = t.strides();
  const auto ud = static_cast<std::size_t>(d);
  // Any stride serves an extent of 1; the one that keeps a contiguous tensor contiguous.
  const std::int64_t stride = ud < s.size() ? s[ud] * st[ud] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  // Recorded as a reshape, as squeeze is.
  return recorded_reshape(x, view_of(t, t.offset(), s, st));
}

Variable contiguous(const Variable& x) {
  DPL_CHECK(x.defined(), "contiguous: expected an input, got an undefined Variable");
  if (x.data().is_contiguous()) return x;
  return recorded_reshape(x, x.data().contiguous());
}

Variable expand(const Variable& x, const Shape& shape) {
  const char* op = "expand";
  DPL_CHECK(x.defined(), op, ": expected an input, got an undefined Variable");
  const Tensor& t = x.data();
  const auto rank = static_cast<std::int64_t>(shape.size());
  DPL_CHECK(rank >= t.dim(), op, ": cannot expand a tensor of shape ", shape_str(t.shape()), " to ", shape_str(shape),
            ", which has fewer dimensions");
  const std::int64_t lead = rank - t.dim();
  Shape out_shape(shape.size());
  Strides out_strides(shape.size(), 0);
  for (std::int64_t d = 0; d < rank; ++d) {
    const auto ud = static_cast<std::size_t>(d);
    const std::int64_t want = shape[ud];
    if (d < lead) {
      DPL_CHECK(want >= 0, op, ": expected extents >= 0 for the new leading dimensions, got ", shape_str(shape));
      out_shape[ud] = want;
      continue;
    }
    const std::int64_t have = t.size(d - lead);
    DPL_CHECK(want == -1 || want == have || have == 1, op, ": cannot expand a tensor of shape ",
              shape_str(t.shape()), " to ", shape_str(shape), ": dimension ", d, " has extent ", have,
              " (only extents of 1 expand)");
    out_shape[ud] = want == -1 ? have : want;
    out_strides[ud] = out_shape[ud] == have ? t.strides()[static_cast<std::size_t>(d - lead)] : 0;
  }
  Tensor out = view_of(t, t.offset(), out_shape, out_strides);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<ExpandNode>();
  node->in_shape = t.shape();
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

Variable narrow(const Variable& x, std::int64_t dim, std::int64_t start, std::int64_t length) {
  const char* op = "narrow";
  DPL_CHECK(x.defined(), op, ": expected an input, got an undefined Variable");
  const std::int64_t d = wrap_dim(op, dim, x.data().dim());
  const std::int64_t extent = x.data().size(d);
  const std::int64_t s = start < 0 ? start + extent : start;
  DPL_CHECK(s >= 0 && length >= 0 && s + length <= extent, op, ": the slice [", start, ", ", start, " + ", length,
            ") does not fit dimension ", dim, " of extent ", extent);
  return make_view(op, x, [=](const Tensor& t) { return sliced(t, d, s, length, 1); }, length == extent);
}

Variable slice(const Variable& x, std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step) {
  const char* op = "slice";
  DPL_CHECK(x.defined(), op, ": expected an input, got an undefined Variable");
  DPL_CHECK(step >= 1, op, ": expected a step >= 1, got ", step);
  const std::int64_t d = wrap_dim(op, dim, x.data().dim());
  const std::int64_t extent = x.data().size(d);
  const auto clamp = [extent](std::int64_t i) { return std::clamp<std::int64_t>(i < 0 ? i + extent : i, 0, extent); };
  const std::int64_t s = clamp(start), e = std::max(clamp(end), s);
  const std::int64_t count = (e - s + step - 1) / step;
  return make_view(op, x, [=](const Tensor& t) { return sliced(t, d, s, count, step); }, count == extent);
}

// --- joins and splits -------------------------------------------------------------------------

Variable cat(const std::vector<Variable>& xs, std::int64_t dim) {
  const char* op = "cat";
  DPL_CHECK(!xs.empty(), op, ": expected at least one input, got none");
  for (const Variable& x : xs) check_operands(op, {{xs[0], "the first input"}, {x, "an input"}});
  const Tensor& first = xs[0].data();
  const std::int64_t d = wrap_dim(op, dim, first.dim());
  Shape out_shape = first.shape();
  out_shape[static_cast<std::size_t>(d)] = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i].data();
    bool fits = t.dim() == first.dim();
    for (std::int64_t k = 0; fits && k < t.dim(); ++k) fits = k == d || t.size(k) == first.size(k);
    DPL_CHECK(fits, op, ": expected inputs of shape ", shape_str(first.shape()), " but for dimension ", d,
              ", got ", shape_str(t.shape()), " for input ", i);
    out_shape[static_cast<std::size_t>(d)] += t.size(d);
  }
  Tensor out = empty_on(out_shape, first);
  auto node = std::make_shared<CatNode>();
  node->dim = d;
  std::vector<Tensor> inputs;
  std::int64_t start = 0;
  for (const Variable& x : xs) {
    const std::int64_t n = x.data().size(d);
    inputs.push_back(dense(x.data()));
    node->starts.push_back(start);
    node->lengths.push_back(n);
    start += n;
  }
  backend::cat(inputs, d, out);
  bool record = false;
  for (const Variable& x : xs) record = record || any_requires_grad({&x});
  if (!record) return Variable(out);
  node->set_inputs(xs);
  return Variable::make_result(out, node);
}

Variable stack(const std::vector<Variable>& xs, std::int64_t dim) {
  DPL_CHECK(!xs.empty(), "stack: expected at least one input, got none");
  std::vector<Variable> parts;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    DPL_CHECK(xs[i].defined() && xs[i].shape() == xs[0].shape(), "stack: expected inputs of one shape, got ",
              shape_str(xs[0].shape()), " for input 0 and ", xs[i].defined() ? shape_str(xs[i].shape()) : "none",
              " for input ", i);
    parts.push_back(unsqueeze(xs[i], wrap_dim("stack", dim, xs[i].data().dim() + 1)));
  }
  return cat(parts, dim < 0 ? dim + xs[0].data().dim() + 1 : dim);
}

std::vector<Variable> split(const Variable& x, const std::vector<std::int64_t>& sizes, std::int64_t dim) {
  const char* op = "split";
  DPL_CHECK(x.defined(), op, ": expected an input, got an undefined Variable");
  const std::int64_t d = wrap_dim(op, dim, x.data().dim());
  std::int64_t total = 0;
  for (std::int64_t s : sizes) {
    DPL_CHECK(s >= 0, op, ": expected sizes >= 0, got ", shape_str(sizes));
    total += s;
  }
  DPL_CHECK(total == x.data().size(d), op, ": sizes ", shape_str(sizes), " sum to ", total,
            ", expected the extent of dimension ", dim, " of shape ", shape_str(x.shape()), ", ", x.data().size(d));
  std::vector<Variable> out;
  std::int64_t start = 0;
  for (std::int64_t s : sizes) {
    out.push_back(narrow(x, d, start, s));
    start += s;
  }
  return out;
}

std::vector<Variable> split(const Variable& x, std::int64_t split_size, std::int64_t dim) {
  DPL_CHECK(x.defined(), "split: expected an input, got an undefined Variable");
  DPL_CHECK(split_size >= 1, "split: expected a split size >= 1, got ", split_size);
  const std::int64_t extent = x.data().size(wrap_dim("split", dim, x.data().dim()));
  std::vector<std::int64_t> sizes;
  for (std::int64_t start = 0; start < extent; start += split_size)
    sizes.push_back(std::min(split_size, extent - start));
  if (sizes.empty()) sizes.push_back(0);  // PyTorch gives one empty piece of an empty dimension
  return split(x, sizes, dim);
}

std::vector<Variable> chunk(const Variable& x, std::int64_t chunks, std::int64_t dim) {
  DPL_CHECK(x.defined(), "chunk: expected an input, got an undefined Variable");
  DPL_CHECK(chunks >= 1, "chunk: expected chunks >= 1, got ", chunks);
  const std::int64_t extent = x.data().size(wrap_dim("chunk", dim, x.data().dim()));
  return split(x, std::max<std::int64_t>((extent + chunks - 1) / chunks, 1), dim);
}

Variable pad(const Variable& x, const std::vector<std::int64_t>& pads, double value) {
  const char* op = "pad";
  check_operands(op, {{x, "an input"}});
  const Tensor& t = x.data();
  const auto rank = t.dim();
  DPL_CHECK(pads.size() % 2 == 0 && static_cast<std::int64_t>(pads.size()) <= 2 * rank, op,
            ": expected an even number of pads, at most two per dimension (", 2 * rank, " for shape ",
            shape_str(t.shape()), "), got ", pads.size());
  Shape out_shape = t.shape();
  // Per padded dimension: (dimension, before, after); pads start with the last dimension.
  std::vector<std::array<std::int64_t, 3>> sides;
  for (std::size_t i = 0; i < pads.size(); i += 2) {
    const std::int64_t d = rank - 1 - static_cast<std::int64_t>(i / 2);
    const auto ud = static_cast<std::size_t>(d);
    out_shape[ud] = t.size(d) + pads[i] + pads[i + 1];
    DPL_CHECK(out_shape[ud] >= 0, op, ": pads (", pads[i], ", ", pads[i + 1], ") of dimension ", d, " of shape ",
              shape_str(t.shape()), " leave a negative extent");
    sides.push_back({d, pads[i], pads[i + 1]});
  }
  // How many elements of an input extent n survive the pads: negative ones crop.
  const auto kept = [](std::int64_t n, std::int64_t before, std::int64_t after) {
    const std::int64_t zero = 0;
    return std::max(n + std::min(before, zero) + std::min(after, zero), zero);
  };
  PadRegions r;
  r.src = [sides, kept](const Tensor& in) {
    Tensor v = in;
    for (const auto& [d, before, after] : sides) {
      const std::int64_t start = std::min(std::max<std::int64_t>(-before, 0), in.size(d));
      v = sliced(v, d, start, kept(in.size(d), before, after), 1);
    }
    return v;
  };
  const Shape in_shape = t.shape();
  r.dst = [sides, kept, in_shape](const Tensor& out) {
    Tensor v = out;
    for (const auto& [d, before, after] : sides) {
      const std::int64_t start = std::min(std::max<std::int64_t>(before, 0), out.size(d));
      v = sliced(v, d, start, kept(in_shape[static_cast<std::size_t>(d)], before, after), 1);
    }
    return v;
  };
  for (const auto& [d, before, after] : sides) r.crops = r.crops || before < 0 || after < 0;
  Tensor out = empty_on(out_shape, t);
  out.fill_(value);
  r.dst(out).copy_(r.src(t));
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<PadNode>();
  node->regions = std::move(r);
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

}  // namespace dpl
