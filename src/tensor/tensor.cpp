#include "dpl/tensor/tensor.hpp"

#include <cmath>
#include <cstring>
#include <iomanip>
#include <type_traits>
#include <vector>

#include "backend/kernels.hpp"

namespace dpl {

namespace {
// Packed channels-last strides of a 4-D (N, C, H, W) shape: NHWC in memory.
Strides channels_last_strides(const Shape& shape) {
  const Strides nhwc = contiguous_strides({shape[0], shape[2], shape[3], shape[1]});
  return {nhwc[0], nhwc[3], nhwc[1], nhwc[2]};
}

std::int64_t normalize_dim(std::int64_t d, std::int64_t ndim, const char* op) {
  const std::int64_t r = d < 0 ? d + ndim : d;
  DPL_CHECK(r >= 0 && r < ndim, op, ": dimension ", d, " is out of range for a tensor of ", ndim, " dimensions");
  return r;
}
void check_shape_valid(const Shape& shape, const char* op) {
  for (auto e : shape) DPL_CHECK(e >= 0, op, ": extents must be non-negative, got shape ", shape_str(shape));
  // The strides multiply every suffix of the extents, and the element count every prefix; a zero
  // extent makes the tensor empty but does not keep the others' product from overflowing there.
  std::int64_t span = 1;
  for (auto e : shape)
    DPL_CHECK(e == 0 || !__builtin_mul_overflow(span, e, &span), op, ": the non-zero extents of shape ",
              shape_str(shape), " multiply to more than 2^63 - 1 elements");
}
}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, std::int64_t offset, Shape shape, Strides strides, DType dtype)
    : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)), strides_(std::move(strides)),
      dtype_(dtype) {
  DPL_CHECK(shape_.size() == strides_.size(), "Tensor: shape ", shape_str(shape_), " and strides ",
            shape_str(strides_), " differ in rank");
  if (storage_ && numel() > 0) {
    // The furthest element any index can reach must lie inside the storage.
    std::int64_t last = offset_;
    for (std::size_t i = 0; i < shape_.size(); ++i) last += (shape_[i] - 1) * strides_[i];
    const auto capacity = static_cast<std::int64_t>(storage_->nbytes() / dtype_size(dtype_));
    DPL_CHECK(offset_ >= 0 && last < capacity, "Tensor: a view of shape ", shape_str(shape_), " at element offset ",
              offset_, " reaches element ", last, " but its storage holds ", capacity, " elements");
  }
}

// --- creation ----------------------------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, TensorOptions o) {
  check_shape_valid(shape, "Tensor::empty");
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(o.dtype);
  return Tensor(Storage::allocate(bytes, o.device), 0, shape, contiguous_strides(shape), o.dtype);
}

Tensor Tensor::empty_channels_last(const Shape& shape, TensorOptions o) {
  DPL_CHECK(shape.size() == 4, "Tensor::empty_channels_last: expected a 4-D shape (N, C, H, W), got ",
            shape_str(shape));
  check_shape_valid(shape, "Tensor::empty_channels_last");
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(o.dtype);
  return Tensor(Storage::allocate(bytes, o.device), 0, shape, channels_last_strides(shape), o.dtype);
}

Tensor Tensor::empty_like(const Tensor& t) {
  const TensorOptions o(t.dtype(), t.device());
  return t.memory_format() == MemoryFormat::kChannelsLast ? empty_channels_last(t.shape(), o) : empty(t.shape(), o);
}

Tensor Tensor::zeros(const Shape& shape, TensorOptions o) { return full(shape, 0.0, o); }
Tensor Tensor::ones(const Shape& shape, TensorOptions o) { return full(shape, 1.0, o); }

Tensor Tensor::full(const Shape& shape, double value, TensorOptions o) {
  Tensor t = empty(shape, o);
  t.fill_(value);
  return t;
}

Tensor Tensor::arange(double start, double end, double step, TensorOptions o) {
  DPL_CHECK(step != 0.0, "Tensor::arange: expected a non-zero step, got 0");
  const double span = (end - start) / step;
  const auto n = static_cast<std::int64_t>(span > 0 ? std::ceil(span) : 0);
  Tensor host = empty({n}, TensorOptions(o.dtype, Device::cpu()));
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = start + step * static_cast<double>(i);
    switch (o.dtype) {
      case DType::kFloat32: host.data<float>()[i] = static_cast<float>(v); break;
      case DType::kInt32: host.data<std::int32_t>()[i] = static_cast<std::int32_t>(v); break;
      case DType::kInt64: host.data<std::int64_t>()[i] = static_cast<std::int64_t>(v); break;
      default: DPL_FAIL("Tensor::arange: dtype ", o.dtype, " is not supported; use float32, int32 or int64");
    }
  }
  return host.to(o.device);
}

Tensor Tensor::uniform(const Shape& shape, float low, float high, Generator& gen, TensorOptions o) {
  DPL_CHECK(is_float_dtype(o.dtype), "Tensor::uniform: expected dtype float32, bfloat16 or float16, got ", o.dtype);
  DPL_CHECK(low <= high, "Tensor::uniform: expected low <= high, got low=", low, " high=", high);
  Tensor host = empty(shape);
  float* p = host.data<float>();
  for (std::int64_t i = 0, n = host.numel(); i < n; ++i) p[i] = gen.uniform(low, high);
  return host.to(o.dtype).to(o.device);
}

Tensor Tensor::normal(const Shape& shape, float mean, float stddev, Generator& gen, TensorOptions o) {
  DPL_CHECK(is_float_dtype(o.dtype), "Tensor::normal: expected dtype float32, bfloat16 or float16, got ", o.dtype);
  DPL_CHECK(stddev >= 0, "Tensor::normal: expected stddev >= 0, got ", stddev);
  Tensor host = empty(shape);
  float* p = host.data<float>();
  for (std::int64_t i = 0, n = host.numel(); i < n; ++i) p[i] = gen.normal(mean, stddev);
  return host.to(o.dtype).to(o.device);
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  check_shape_valid(shape, "Tensor::from_vector");
  DPL_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape), "Tensor::from_vector: shape ",
            shape_str(shape), " holds ", shape_numel(shape), " elements but ", values.size(), " values were given");
  Tensor host = empty(shape, dtype_of<T>());
  if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
  return host.to(device);
}
template Tensor Tensor::from_vector<float>(const std::vector<float>&, const Shape&, Device);
template Tensor Tensor::from_vector<std::int32_t>(const std::vector<std::int32_t>&, const Shape&, Device);
template Tensor Tensor::from_vector<std::int64_t>(const std::vector<std::int64_t>&, const Shape&, Device);
template Tensor Tensor::from_vector<std::uint8_t>(const std::vector<std::uint8_t>&, const Shape&, Device);

// --- metadata ----------------------------------------------------------------------------------

std::int64_t Tensor::size(std::int64_t d) const { return shape_[normalize_dim(d, dim(), "Tensor::size")]; }

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (std::size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

bool Tensor::is_channels_last() const {
  if (shape_.size() != 4) return false;
  // Walk the dimensions from the fastest (C) to the slowest (N) in NHWC order.
  std::int64_t expected = 1;
  for (const std::size_t i : {std::size_t{1}, std::size_t{3}, std::size_t{2}, std::size_t{0}}) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

MemoryFormat Tensor::memory_format() const {
  if (!is_channels_last()) return MemoryFormat::kContiguous;
  if (!is_contiguous()) return MemoryFormat::kChannelsLast;
  // Both orders fit when size-1 dimensions leave it open (a 1x1 image, a single channel): the
  // strides as laid out decide, so what empty_channels_last made stays channels-last and the
  // tensors an op makes for it (empty_like) get its exact strides.
  return shape_.size() == 4 && strides_ == channels_last_strides(shape_) && strides_ != contiguous_strides(shape_)
             ? MemoryFormat::kChannelsLast
             : MemoryFormat::kContiguous;
}

bool Tensor::shares_storage_with(const Tensor& other) const {
  return storage_ != nullptr && storage_ == other.storage_;
}

void* Tensor::raw_data() const {
  DPL_CHECK(defined(), "Tensor: the tensor is undefined (default-constructed); it has no data");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

template <typename T>
T* Tensor::data() const {
  check_dtype(dtype_of<T>(), "Tensor::data");
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template std::int32_t* Tensor::data<std::int32_t>() const;
template std::int64_t* Tensor::data<std::int64_t>() const;
template std::uint8_t* Tensor::data<std::uint8_t>() const;

void Tensor::check_dtype(DType expected, const char* what) const {
  DPL_CHECK(dtype_ == expected, what, ": expected dtype ", expected, ", got ", dtype_);
}

// --- views -------------------------------------------------------------------------------------

Tensor Tensor::reshape(const Shape& shape) const {
  DPL_CHECK(defined(), "reshape: the tensor is undefined");
  DPL_CHECK(is_contiguous(), "reshape: expected a contiguous tensor, got shape ", shape_str(shape_),
            " with strides ", shape_str(strides_), "; call contiguous() first");
  Shape out = shape;
  std::int64_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      DPL_CHECK(infer < 0, "reshape: at most one extent may be -1, got ", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      DPL_CHECK(out[i] >= 0, "reshape: extents must be >= 0 or -1, got ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    DPL_CHECK(known > 0 && numel() % known == 0, "reshape: cannot reshape ", shape_str(shape_), " (", numel(),
              " elements) into ", shape_str(shape));
    out[infer] = numel() / known;
  }
  DPL_CHECK(shape_numel(out) == numel(), "reshape: cannot reshape ", shape_str(shape_), " (", numel(),
            " elements) into ", shape_str(shape), " (", shape_numel(out), " elements)");
  return Tensor(storage_, offset_, out, contiguous_strides(out), dtype_);
}

Tensor Tensor::flatten(std::int64_t start_dim) const {
  if (dim() == 0) return reshape({1});
  const std::int64_t s = normalize_dim(start_dim, dim(), "flatten");
  Shape out(shape_.begin(), shape_.begin() + s);
  std::int64_t rest = 1;
  for (std::int64_t i = s; i < dim(); ++i) rest *= shape_[i];
  out.push_back(rest);
  return reshape(out);
}

Tensor Tensor::narrow(std::int64_t d, std::int64_t start, std::int64_t length) const {
  const std::int64_t dd = normalize_dim(d, dim(), "narrow");
  DPL_CHECK(start >= 0 && length >= 0 && start + length <= shape_[dd], "narrow: the range [", start, ", ",
            start + length, ") lies outside dimension ", d, " of extent ", shape_[dd], " (shape ", shape_str(shape_),
            ")");
  Shape s = shape_;
  s[dd] = length;
  return Tensor(storage_, offset_ + start * strides_[dd], s, strides_, dtype_);
}

Tensor Tensor::view_range(std::int64_t element_offset, const Shape& shape) const {
  DPL_CHECK(defined(), "view_range: the tensor is undefined");
  DPL_CHECK(is_contiguous(), "view_range: expected a contiguous tensor, got strides ", shape_str(strides_));
  check_shape_valid(shape, "view_range");
  const std::int64_t n = shape_numel(shape);
  DPL_CHECK(element_offset >= 0 && element_offset + n <= numel(), "view_range: a view of shape ", shape_str(shape),
            " (", n, " elements) at offset ", element_offset, " reaches past the end of a tensor of ", numel(),
            " elements");
  return Tensor(storage_, offset_ + element_offset, shape, contiguous_strides(shape), dtype_);
}

// --- copies ------------------------------------------------------------------------------------

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::to_channels_last() const {
  DPL_CHECK(dim() == 4, "Tensor::to_channels_last: expected a 4-D tensor (N, C, H, W), got shape ", shape_str(shape_));
  if (is_channels_last()) return *this;
  Tensor out = empty_channels_last(shape_, TensorOptions(dtype_, device()));
  out.copy_(*this);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, TensorOptions(dtype_, device()));
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor out = empty(shape_, TensorOptions(dtype_, device));
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  DPL_CHECK(defined(), "Tensor::to: the tensor is undefined");
  if (dtype == dtype_) return *this;
  DPL_CHECK(is_float_dtype(dtype_) && is_float_dtype(dtype), "Tensor::to: converts between float32, bfloat16 and "
            "float16, got a conversion from ", dtype_, " to ", dtype);
  // A channels-last tensor converts in memory order and stays channels-last.
  const bool channels_last = memory_format() == MemoryFormat::kChannelsLast;
  Tensor out = channels_last ? empty_channels_last(shape_, TensorOptions(dtype, device()))
                             : empty(shape_, TensorOptions(dtype, device()));
  backend::cast(channels_last ? *this : contiguous(), out);
  return out;
}

void Tensor::copy_(const Tensor& src) {
  DPL_CHECK(defined() && src.defined(), "copy_: both tensors must be defined");
  DPL_CHECK(shape_ == src.shape_, "copy_: expected a source of shape ", shape_str(shape_), ", got ",
            shape_str(src.shape_));
  DPL_CHECK(dtype_ == src.dtype_ || (is_float_dtype(dtype_) && is_float_dtype(src.dtype_)),
            "copy_: expected a source of dtype ", dtype_, (is_float_dtype(dtype_) ? " (or another float dtype)" : ""),
            ", got ", src.dtype_);
  if (numel() == 0) return;
  if (dtype_ != src.dtype_) {
    copy_(src.to(dtype_));  // converted where the source lives, then moved
    return;
  }
  if (device() == src.device()) {
    if (is_contiguous() && src.is_contiguous()) {
      backend::copy_bytes(device(), raw_data(), src.raw_data(), nbytes());
    } else {
      backend::copy_strided(src, *this);
    }
    return;
  }
  const Tensor s = src.contiguous();
  if (is_contiguous()) {
    backend::copy_between_devices(s, *this);
  } else {
    Tensor staged = empty(shape_, TensorOptions(dtype_, device()));
    backend::copy_between_devices(s, staged);
    copy_(staged);
  }
}

void Tensor::fill_(double value) {
  DPL_CHECK(defined(), "fill_: the tensor is undefined");
  if (numel() == 0) return;
  backend::fill(*this, value);
}

// --- element access ----------------------------------------------------------------------------

std::int64_t Tensor::element_index(std::initializer_list<std::int64_t> index) const {
  DPL_CHECK(static_cast<std::int64_t>(index.size()) == dim(), "Tensor::at: expected ", dim(),
            " indices for shape ", shape_str(shape_), ", got ", index.size());
  std::int64_t off = offset_;
  std::size_t i = 0;
  for (auto ix : index) {
    DPL_CHECK(ix >= 0 && ix < shape_[i], "Tensor::at: index ", ix, " is out of range for dimension ", i,
              " of extent ", shape_[i]);
    off += ix * strides_[i];
    ++i;
  }
  return off;
}

template <typename T>
T Tensor::at(std::initializer_list<std::int64_t> index) const {
  check_dtype(dtype_of<T>(), "Tensor::at");
  const std::int64_t e = element_index(index);
  Tensor one(storage_, e, {}, {}, dtype_);
  if (device().is_cpu()) return *static_cast<T*>(one.raw_data());
  return one.to(Device::cpu()).template data<T>()[0];
}

template <typename T>
void Tensor::set(std::initializer_list<std::int64_t> index, T value) {
  check_dtype(dtype_of<T>(), "Tensor::set");
  const std::int64_t e = element_index(index);
  Tensor one(storage_, e, {}, {}, dtype_);
  if (device().is_cpu()) {
    *static_cast<T*>(one.raw_data()) = value;
  } else {
    one.copy_(Tensor::from_vector<T>({value}, {}));
  }
}

float Tensor::item() const {
  DPL_CHECK(defined() && numel() == 1, "item: expected a tensor with one element, got shape ", shape_str(shape_));
  DPL_CHECK(is_float_dtype(dtype_), "item: expected dtype float32, bfloat16 or float16, got ", dtype_);
  return to(Device::cpu()).to(DType::kFloat32).contiguous().data<float>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_dtype(dtype_of<T>(), "Tensor::to_vector");
  const Tensor host = contiguous().to(Device::cpu());
  const T* p = host.data<T>();
  return std::vector<T>(p, p + numel());
}

#define DPL_INSTANTIATE_ACCESS(T)                                              \
  template T Tensor::at<T>(std::initializer_list<std::int64_t>) const;        \
  template void Tensor::set<T>(std::initializer_list<std::int64_t>, T);       \
  template std::vector<T> Tensor::to_vector<T>() const;
DPL_INSTANTIATE_ACCESS(float)
DPL_INSTANTIATE_ACCESS(std::int32_t)
DPL_INSTANTIATE_ACCESS(std::int64_t)
DPL_INSTANTIATE_ACCESS(std::uint8_t)
#undef DPL_INSTANTIATE_ACCESS

namespace {
// ", values=[...]" for a small tensor; integers print as numbers (a uint8 is not a character).
template <typename T>
void print_values(std::ostream& os, const Tensor& t) {
  os << ", values=[";
  const std::vector<T> v = t.to_vector<T>();
  for (std::size_t i = 0; i < v.size(); ++i) {
    os << (i ? ", " : "");
    if constexpr (std::is_same_v<T, float>) os << std::setprecision(6) << v[i];
    else os << static_cast<std::int64_t>(v[i]);
  }
  os << ']';
}
}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "Tensor(undefined)";
  os << "Tensor(shape=" << shape_str(t.shape()) << ", dtype=" << t.dtype() << ", device=" << t.device();
  if (t.numel() <= 16) {
    switch (t.dtype()) {
      case DType::kFloat32: print_values<float>(os, t); break;
      case DType::kInt32: print_values<std::int32_t>(os, t); break;
      case DType::kInt64: print_values<std::int64_t>(os, t); break;
      case DType::kUInt8: print_values<std::uint8_t>(os, t); break;
      case DType::kBFloat16:
      case DType::kFloat16: break;  // summarised by shape and dtype, as before
    }
  }
  return os << ')';
}

}  // namespace dpl
