#pragma once
// Tensor: a shaped, typed view of a Storage on some device.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <vector>

#include "dpl/core/device.hpp"
#include "dpl/core/dtype.hpp"
#include "dpl/core/error.hpp"
#include "dpl/core/random.hpp"
#include "dpl/core/shape.hpp"
#include "dpl/tensor/storage.hpp"

namespace dpl {

/// Options for creating a tensor: element type and device.
struct TensorOptions {
  DType dtype = DType::kFloat32;
  Device device = Device::cpu();
  TensorOptions() = default;
  TensorOptions(DType t) : dtype(t) {}                // NOLINT: implicit on purpose
  TensorOptions(Device d) : device(d) {}              // NOLINT
  TensorOptions(DType t, Device d) : dtype(t), device(d) {}
};

/// How a 4-D (N, C, H, W) tensor lies in memory: contiguous (NCHW, Tensor::empty) or
/// channels-last (NHWC strides, Tensor::empty_channels_last). Names the layout a producer is asked
/// for, e.g. data::normalize_images.
enum class MemoryFormat : std::uint8_t { kContiguous, kChannelsLast };

/// A view (offset, shape, strides, dtype) of a shared Storage. Copying a Tensor copies the view,
/// not the data: both then alias the same memory. A default-constructed Tensor is undefined.
///
/// This class holds data, creates views and moves bytes. Differentiable math lives in the autograd
/// ops (dpl/autograd/ops.hpp); plain elementwise arithmetic for preparing data, in
/// dpl/tensor/tensor_ops.hpp.
class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, std::int64_t offset, Shape shape, Strides strides, DType dtype);

  // --- creation ------------------------------------------------------------------------------
  /// Uninitialised contiguous tensor.
  static Tensor empty(const Shape& shape, TensorOptions options = {});
  static Tensor zeros(const Shape& shape, TensorOptions options = {});
  static Tensor ones(const Shape& shape, TensorOptions options = {});
  static Tensor full(const Shape& shape, double value, TensorOptions options = {});
  /// [start, start+step, ...) below end, as a 1-D tensor.
  static Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
  /// Uniform in [low, high) drawn from gen as float32, then rounded to a 16-bit float dtype if
  /// options asks for one (float dtypes only; the rounding may reach high).
  static Tensor uniform(const Shape& shape, float low, float high, Generator& gen = default_generator(),
                        TensorOptions options = {});
  /// Normal(mean, stddev) drawn from gen as float32, then rounded to a 16-bit float dtype if
  /// options asks for one (float dtypes only).
  static Tensor normal(const Shape& shape, float mean, float stddev, Generator& gen = default_generator(),
                       TensorOptions options = {});
  /// Uninitialised 4-D tensor of logical shape (N, C, H, W) laid out channels-last: its strides
  /// are NHWC's (C has stride 1), the layout convolutions read fastest. Requires a 4-D shape.
  static Tensor empty_channels_last(const Shape& shape, TensorOptions options = {});
  /// Uninitialised tensor of t's shape, dtype and device in t's memory format: channels-last when
  /// t is channels-last (and not also contiguous), contiguous otherwise.
  static Tensor empty_like(const Tensor& t);
  /// A tensor holding a copy of values; values.size() must equal the shape's element count.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());

  // --- metadata ------------------------------------------------------------------------------
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape_.size()); }
  /// Extent of dimension d; negative d counts from the end.
  std::int64_t size(std::int64_t d) const;
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  std::int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  bool is_contiguous() const;
  /// True for a 4-D tensor whose strides are NHWC's, extents of 1 ignored (so a contiguous
  /// tensor with C == 1 or H == W == 1 is both: its memory order is the same either way).
  bool is_channels_last() const;
  /// kChannelsLast when is_channels_last() and not is_contiguous(), kContiguous when not
  /// is_channels_last() (every tensor that is not 4-D, and a strided view that is neither). Where
  /// size-1 dimensions make both hold (one channel, a 1x1 image) the strides decide: kChannelsLast
  /// for exactly the packed NHWC strides (empty_channels_last's) unless also the packed NCHW ones.
  MemoryFormat memory_format() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  /// True when both tensors view the same Storage.
  bool shares_storage_with(const Tensor& other) const;

  // --- raw access ----------------------------------------------------------------------------
  /// Pointer to the first element (device memory for a CUDA tensor). Requires a defined tensor.
  void* raw_data() const;
  /// Typed pointer to the first element; requires dtype() == dtype_of<T>().
  template <typename T>
  T* data() const;

  // --- views ---------------------------------------------------------------------------------
  /// Same data, new shape; one extent may be -1 (inferred). Requires a contiguous tensor.
  Tensor reshape(const Shape& shape) const;
  /// Collapses dimensions start_dim..end into one (flatten(1) turns (N,C,H,W) into (N,CHW)).
  Tensor flatten(std::int64_t start_dim = 0) const;
  /// The slice [start, start+length) of dimension d.
  Tensor narrow(std::int64_t d, std::int64_t start, std::int64_t length) const;
  /// A contiguous view of `shape` starting `element_offset` elements into this contiguous
  /// tensor's data. Throws when the view would reach past this tensor's elements.
  Tensor view_range(std::int64_t element_offset, const Shape& shape) const;

  // --- copies --------------------------------------------------------------------------------
  /// A contiguous tensor with the same values (this tensor itself when already contiguous).
  Tensor contiguous() const;
  /// A channels-last tensor with the same values (this tensor itself when already channels-last).
  /// Requires a 4-D tensor.
  Tensor to_channels_last() const;
  /// A new contiguous tensor with a copy of the values.
  Tensor clone() const;
  /// A copy on device (this tensor itself when already there).
  Tensor to(Device device) const;
  /// A contiguous copy converted to dtype, on the same device (this tensor itself when it has
  /// dtype already). Converts between float32, bfloat16 and float16, rounding to nearest even
  /// (NaN stays NaN); throws dpl::Error for any other pair of dtypes.
  Tensor to(DType dtype) const;
  /// Copies src's values into this tensor. Shapes must match; devices may differ; dtypes must
  /// match, except that float32, bfloat16 and float16 convert into each other (as to(DType)).
  void copy_(const Tensor& src);
  /// Sets every element to value.
  void fill_(double value);

  // --- element access (tests, printing; slow for device tensors) ----------------------------
  /// The value at the multi-index (one index per dimension).
  template <typename T>
  T at(std::initializer_list<std::int64_t> index) const;
  /// Sets the value at the multi-index.
  template <typename T>
  void set(std::initializer_list<std::int64_t> index, T value);
  /// The single value of a one-element float32, bfloat16 or float16 tensor, on the host.
  float item() const;
  /// All values, in row-major order, on the host.
  template <typename T>
  std::vector<T> to_vector() const;

 private:
  std::int64_t element_index(std::initializer_list<std::int64_t> index) const;
  void check_dtype(DType expected, const char* what) const;

  std::shared_ptr<Storage> storage_;
  std::int64_t offset_ = 0;  // in elements
  Shape shape_;
  Strides strides_;
  DType dtype_ = DType::kFloat32;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace dpl
