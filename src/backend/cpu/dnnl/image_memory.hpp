#pragma once
// (N, C, H, W) tensors as oneDNN memory, for the normalisation and pooling kernels. Internal.
//
// oneDNN reads any strides, so NCHW and channels-last tensors are described as they are and no
// layout copy is made. 16-bit tensors are widened to float32 in their own memory format and the
// results rounded back once, as every CPU kernel does (cpu.hpp), because oneDNN's bfloat16 and
// float16 paths depend on the CPU's instruction set.

#include <cstring>
#include <string>

#include "backend/cpu/cpu.hpp"
#include "backend/cpu/dnnl/dnnl_runtime.hpp"
#include "dpl/tensor/storage.hpp"

namespace dpl::backend::cpu_detail {

/// Describes a float32 (N, C, H, W) or (C,) tensor's dims and strides for oneDNN.
inline dnnl::memory::desc float_desc(const Tensor& t) {
  return dnnl::memory::desc(dnnl::memory::dims(t.shape().begin(), t.shape().end()), dnnl::memory::data_type::f32,
                            dnnl::memory::dims(t.strides().begin(), t.strides().end()));
}

/// oneDNN memory over t's elements (t float32, described by float_desc).
inline dnnl::memory float_memory(const Tensor& t) {
  return dnnl::memory(float_desc(t), dnnl_engine(), t.raw_data());
}

/// An uninitialised float32 tensor with t's shape and strides (t dense: NCHW or channels-last).
inline Tensor empty_float_like(const Tensor& t) {
  auto storage = Storage::allocate(static_cast<std::size_t>(t.numel()) * sizeof(float), Device::cpu());
  return Tensor(storage, 0, t.shape(), t.strides(), kFloat32);
}

/// True when t (N, C, H, W) is dense channels-last: the stride of C is 1 and of W is C.
inline bool is_channels_last(const Tensor& t) {
  return t.dim() == 4 && t.strides()[1] == 1 && t.strides()[3] == t.size(1) && t.strides()[2] == t.size(3) * t.size(1) &&
         t.strides()[0] == t.size(2) * t.size(3) * t.size(1);
}

/// An uninitialised float32 tensor of `shape` in `like`'s memory format (NCHW or channels-last).
inline Tensor empty_float_in_format(const Shape& shape, const Tensor& like) {
  Strides strides = contiguous_strides(shape);
  if (is_channels_last(like)) strides = {shape[1] * shape[2] * shape[3], 1, shape[3] * shape[1], shape[1]};
  auto storage = Storage::allocate(static_cast<std::size_t>(shape_numel(shape)) * sizeof(float), Device::cpu());
  return Tensor(storage, 0, shape, strides, kFloat32);
}

/// t's values as float32 in t's memory format: t itself when it already is float32.
inline Tensor widened(const Tensor& t) {
  if (t.dtype() == kFloat32) return t;
  Tensor f = empty_float_like(t);
  cpu::convert(t, f);  // elementwise over the dense span: both have the same strides
  return f;
}

/// A float32 tensor in `like`'s memory format holding t's values (t itself when it is float32
/// and already in that format). Both dense (NCHW or channels-last).
inline Tensor float_in_format_of(const Tensor& t, const Tensor& like) {
  if (is_channels_last(t) == is_channels_last(like)) return widened(t);
  Tensor f = empty_float_in_format(t.shape(), like);
  copy_strided(widened(t), f);
  return f;
}

/// out = beta*out + result, where result is float32 with out's shape in any dense format;
/// nothing moves when result already is out's memory.
inline void store(const Tensor& result, float beta, Tensor& out) {
  if (beta == 0.f && result.raw_data() == out.raw_data() && result.strides() == out.strides()) return;
  Tensor r = result;
  if (result.strides() != out.strides()) {
    r = empty_float_like(out);
    copy_strided(result, r);
  }
  if (beta == 0.f) {
    cpu::convert(r, out);
    return;
  }
  Tensor o = widened(out);
  const float* src = r.data<float>();
  float* dst = o.data<float>();
  for (std::int64_t i = 0; i < o.numel(); ++i) dst[i] += src[i];
  if (o.raw_data() != out.raw_data()) cpu::convert(o, out);
}

/// A key part naming t's shape and strides, for caches of primitives.
inline std::string layout_key(const Tensor& t) {
  std::string k;
  for (auto d : t.shape()) k += std::to_string(d) + ",";
  k += "/";
  for (auto s : t.strides()) k += std::to_string(s) + ",";
  return k;
}

}  // namespace dpl::backend::cpu_detail
