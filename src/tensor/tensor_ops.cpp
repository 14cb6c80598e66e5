#include "dpl/tensor/tensor_ops.hpp"

#include "backend/kernels.hpp"

namespace dpl {

namespace {

using backend::BinaryOp;
using backend::Broadcast;

void check_operand(const char* op, const Tensor& t, const char* which) {
  DPL_CHECK(t.defined(), "Tensor operator", op, ": the ", which, " is undefined");
  DPL_CHECK(is_float_dtype(t.dtype()), "Tensor operator", op, ": expected a float32, bfloat16 or float16 ", which,
            ", got ", dtype_name(t.dtype()));
}

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  check_operand(op, a, "left operand");
  check_operand(op, b, "right operand");
  DPL_CHECK(a.shape() == b.shape(), "Tensor operator", op, ": expected operands of one shape, got ",
            shape_str(a.shape()), " and ", shape_str(b.shape()));
  DPL_CHECK(a.dtype() == b.dtype(), "Tensor operator", op, ": expected operands of one dtype, got ",
            dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  DPL_CHECK(a.device() == b.device(), "Tensor operator", op, ": expected operands on one device, got ", a.device(),
            " and ", b.device());
}

// The kernels walk a tensor's elements in memory order, which needs a dense one.
bool is_dense(const Tensor& t) { return t.is_contiguous() || t.is_channels_last(); }
Tensor dense(const Tensor& t) { return is_dense(t) ? t : t.contiguous(); }

// True when b's elements lie at the same offsets as a's (extents of 1 have no stride that counts).
bool same_layout(const Tensor& a, const Tensor& b) {
  for (std::size_t i = 0; i < a.shape().size(); ++i)
    if (a.shape()[i] != 1 && a.strides()[i] != b.strides()[i]) return false;
  return true;
}

// b (of dense a's shape) laid out as a: b itself when it is, else a copy.
Tensor laid_out_as(const Tensor& b, const Tensor& a) {
  if (same_layout(a, b)) return b;
  Tensor out = Tensor::empty_like(a);
  out.copy_(b);
  return out;
}

Tensor binary(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  check_pair(name, a, b);
  const Tensor x = dense(a);
  Tensor out = Tensor::empty_like(x);
  backend::binary(op, Broadcast::kNone, x, laid_out_as(b, x), 0.f, out);
  return out;
}

Tensor& binary_in_place(BinaryOp op, const char* name, Tensor& a, const Tensor& b) {
  if (!is_dense(a)) {
    a.copy_(binary(op, name, a, b));
    return a;
  }
  check_pair(name, a, b);
  backend::binary(op, Broadcast::kNone, a, laid_out_as(b, a), 0.f, a);
  return a;
}

// out = scale * x + shift, computed as dpl::affine computes it (so the values match the Variable
// operators): the scaling by axpby, then the shift, rounded to x's dtype, by a scalar add. out
// may be x.
void affine_into(const Tensor& x, float scale, float shift, Tensor& out) {
  const Tensor* src = &x;
  if (scale != 1.f || shift == 0.f) {
    backend::axpby(scale, x, 0.f, out);
    src = &out;
  }
  if (shift != 0.f) {
    const Tensor s = Tensor::full({1}, shift, TensorOptions(x.dtype(), x.device()));
    backend::binary(BinaryOp::kAdd, Broadcast::kScalar, *src, s, 0.f, out);
  }
}

Tensor affine(const char* name, const Tensor& t, float scale, float shift) {
  check_operand(name, t, "tensor");
  const Tensor x = dense(t);
  Tensor out = Tensor::empty_like(x);
  affine_into(x, scale, shift, out);
  return out;
}

Tensor& affine_in_place(const char* name, Tensor& t, float scale, float shift) {
  if (!is_dense(t)) {
    t.copy_(affine(name, t, scale, shift));
    return t;
  }
  check_operand(name, t, "tensor");
  affine_into(t, scale, shift, t);
  return t;
}

}  // namespace

Tensor operator+(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kAdd, "+", a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kSub, "-", a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMul, "*", a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kDiv, "/", a, b); }

Tensor operator+(const Tensor& t, float s) { return affine("+", t, 1.f, s); }
Tensor operator-(const Tensor& t, float s) { return affine("-", t, 1.f, -s); }
Tensor operator*(const Tensor& t, float s) { return affine("*", t, s, 0.f); }
Tensor operator/(const Tensor& t, float s) { return affine("/", t, 1.f / s, 0.f); }
Tensor operator+(float s, const Tensor& t) { return affine("+", t, 1.f, s); }
Tensor operator-(float s, const Tensor& t) { return affine("-", t, -1.f, s); }
Tensor operator*(float s, const Tensor& t) { return affine("*", t, s, 0.f); }
Tensor operator-(const Tensor& t) { return affine("-", t, -1.f, 0.f); }

Tensor& operator+=(Tensor& a, const Tensor& b) { return binary_in_place(BinaryOp::kAdd, "+=", a, b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return binary_in_place(BinaryOp::kSub, "-=", a, b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return binary_in_place(BinaryOp::kMul, "*=", a, b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return binary_in_place(BinaryOp::kDiv, "/=", a, b); }

Tensor& operator+=(Tensor& t, float s) { return affine_in_place("+=", t, 1.f, s); }
Tensor& operator-=(Tensor& t, float s) { return affine_in_place("-=", t, 1.f, -s); }
Tensor& operator*=(Tensor& t, float s) { return affine_in_place("*=", t, s, 0.f); }
Tensor& operator/=(Tensor& t, float s) { return affine_in_place("/=", t, 1.f / s, 0.f); }

}  // namespace dpl
