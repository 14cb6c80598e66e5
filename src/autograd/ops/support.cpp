// The shared operand checks and memory-format rules of the ops (support.hpp).
#include "autograd/ops/support.hpp"

#include <atomic>

namespace dpl::ops_detail {

namespace {
std::atomic<std::uint64_t> g_reductions_filled{0};
}  // namespace

std::uint64_t output_grad_reductions_filled() { return g_reductions_filled.load(std::memory_order_relaxed); }
void count_output_grad_reductions_filled() { g_reductions_filled.fetch_add(1, std::memory_order_relaxed); }

void check_operands(const char* op, std::initializer_list<Operand> operands) {
  const Operand* first = nullptr;
  for (const Operand& o : operands) {
    DPL_CHECK(o.var.defined(), op, ": expected ", o.name, o.layout, ", got an undefined Variable");
    const Tensor& t = o.var.data();
    DPL_CHECK(is_float_dtype(t.dtype()), op, ": expected ", o.name, o.layout,
              " of dtype float32, bfloat16 or float16, got ", t.dtype());
    DPL_CHECK(o.rank < 0 || t.dim() == o.rank, op, ": expected ", o.name, o.layout, " with ", o.rank,
              " dimensions, got shape ", shape_str(t.shape()));
    if (first == nullptr) {
      first = &o;
      continue;
    }
    const Tensor& f = first->var.data();
    DPL_CHECK(t.dtype() == f.dtype(), op, ": expected operands of one dtype, got ", f.dtype(), " for ", first->name,
              " and ", t.dtype(), " for ", o.name);
    check_same_device(op, f, first->name, t, o.name);
  }
}

void check_same_device(const char* op, const Tensor& like, const char* like_name, const Tensor& t,
                       const char* name) {
  DPL_CHECK(t.device() == like.device(), op, ": expected operands on one device, got ", like.device(), " for ",
            like_name, " and ", t.device(), " for ", name);
}

Tensor empty_on(const Shape& shape, const Tensor& like) {
  return Tensor::empty(shape, TensorOptions(like.dtype(), like.device()));
}

Tensor float_input(const char* op, const Variable& x) {
  check_operands(op, {{x, "an input"}});
  return dense_keep(x.data());
}

Tensor image_input(const char* op, const Variable& x) {
  check_operands(op, {{x, "an input", 4, " (N, C, H, W)"}});
  // The image kernels take the strides of a packed NCHW or NHWC tensor, size-1 dimensions too
  // (their own kernels compare strides exactly): a tensor of either format that is not packed
  // (a free stride on a size-1 dimension) is copied into a packed one of its format.
  const Tensor& t = x.data();
  const MemoryFormat f = t.memory_format();
  const Shape& s = t.shape();
  Strides packed = contiguous_strides(f == MemoryFormat::kChannelsLast ? Shape{s[0], s[2], s[3], s[1]} : s);
  if (f == MemoryFormat::kChannelsLast) packed = {packed[0], packed[3], packed[1], packed[2]};  // NHWC to NCHW order
  if (t.strides() == packed) return t;
  Tensor out = empty_in(t.shape(), f, t);
  out.copy_(t);
  return out;
}

PoolWindow pool_window(const char* op, const Tensor& tx, Size2d kernel, Size2d stride, Size2d padding) {
  if (stride.h == 0 && stride.w == 0) stride = kernel;
  DPL_CHECK(kernel.h >= 1 && kernel.w >= 1, op, ": expected a kernel of at least 1x1, got ", kernel.h, "x", kernel.w);
  DPL_CHECK(stride.h >= 1 && stride.w >= 1, op, ": expected strides >= 1, got ", stride.h, "x", stride.w);
  DPL_CHECK(padding.h >= 0 && padding.w >= 0 && 2 * padding.h <= kernel.h && 2 * padding.w <= kernel.w, op,
            ": expected padding between 0 and half the kernel (", kernel.h / 2, "x", kernel.w / 2, "), got ",
            padding.h, "x", padding.w);
  const std::int64_t ph = tx.size(2) + 2 * padding.h, pw = tx.size(3) + 2 * padding.w;
  DPL_CHECK(kernel.h <= ph && kernel.w <= pw, op, ": kernel ", kernel.h, "x", kernel.w,
            " is larger than the padded input ", ph, "x", pw, " (input shape ", shape_str(tx.shape()), ", padding ",
            padding.h, "x", padding.w, ")");
  const backend::Pool2dParams p{kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w};
  const Shape out_shape{tx.size(0), tx.size(1), (ph - kernel.h) / stride.h + 1, (pw - kernel.w) / stride.w + 1};
  return {p, out_shape};
}

bool has_format(const Tensor& t, MemoryFormat f) {
  return f == MemoryFormat::kChannelsLast ? t.is_channels_last() : t.is_contiguous();
}

Tensor in_format(const Tensor& t, MemoryFormat f) {
  return f == MemoryFormat::kChannelsLast ? t.to_channels_last() : t.contiguous();
}

Tensor empty_in(const Shape& shape, MemoryFormat f, const Tensor& like) {
  const TensorOptions o(like.dtype(), like.device());
  return f == MemoryFormat::kChannelsLast ? Tensor::empty_channels_last(shape, o) : Tensor::empty(shape, o);
}

namespace {
// A dense tensor's elements in memory order (the same bytes whatever its format).
Tensor flat(const Tensor& t) { return Tensor(t.storage(), t.offset(), {t.numel()}, {1}, t.dtype()); }
}  // namespace

// One pass when the formats match, a strided copy when the target is overwritten, else g brought
// to the target's format first.
void add_into(const Tensor& g, GradTarget& target) {
  Tensor& buffer = *target.tensor;
  if (g.strides() == buffer.strides()) {
    backend::axpby(1.f, g, target.beta, buffer);
    return;
  }
  if (target.beta == 0.f) {
    buffer.copy_(g);
    return;
  }
  Tensor flat_buffer = flat(buffer);
  backend::axpby(1.f, flat(in_format(g, buffer.memory_format())), 1.f, flat_buffer);
}

void pass_into(const Tensor& g, GradTarget& target) {
  Tensor& buffer = *target.tensor;
  if (target.unallocated && !buffer.defined()) {
    if (target.fits(g)) {
      buffer = g;
      return;
    }
    target.allocate();
  }
  if (target.replaceable && target.beta == 0.f && g.shape() == buffer.shape() && g.strides() == buffer.strides() &&
      g.dtype() == buffer.dtype() && g.device() == buffer.device()) {
    buffer = g;
    return;
  }
  add_into(g, target);
}

std::vector<Variable> defined_inputs(std::initializer_list<const Variable*> inputs) {
  std::vector<Variable> out;
  for (const Variable* v : inputs)
    if (v->defined()) out.push_back(*v);
  return out;
}

std::int64_t wrap_dim(const char* op, std::int64_t dim, std::int64_t rank) {
  DPL_CHECK(dim >= -rank && dim < rank && rank > 0, op, ": dimension ", dim, " is out of range for a tensor of ",
            rank, " dimensions (expected one in [", -rank, ", ", rank - 1, "])");
  return dim < 0 ? dim + rank : dim;
}

}  // namespace dpl::ops_detail
