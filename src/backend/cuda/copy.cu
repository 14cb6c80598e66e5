// Strided copies and fills of device tensors of any dtype. Both move raw element bits, so one
// kernel per element width serves every dtype of that width; a copy whose rows are contiguous
// on both sides (cat, a transpose of middle dimensions, most pads) moves 16-byte units instead.
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/kernels.hpp"
#include "core/half.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

namespace cuda_detail {
namespace {

/// Most dimensions a strided kernel walks after merging contiguous ones.
constexpr int kMaxDims = 8;

/// Shape and the strides of the source and destination, in elements, passed by value.
struct StridedLayout {
  int ndim = 0;
  std::int64_t shape[kMaxDims];
  std::int64_t src_stride[kMaxDims];
  std::int64_t dst_stride[kMaxDims];
};

/// Drops extents of 1 and merges neighbouring dimensions that are contiguous in both layouts, so
/// that most copies end with one or two dimensions. src may be null (fills).
StridedLayout merge_dims(const Shape& shape, const Strides* src, const Strides& dst, const char* op) {
  std::vector<std::int64_t> sh, ss, ds;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 1) continue;
    const std::int64_t s = src ? (*src)[k] : 0;
    if (!sh.empty() && ss.back() == s * shape[k] && ds.back() == dst[k] * shape[k]) {
      sh.back() *= shape[k];
      ss.back() = s;
      ds.back() = dst[k];
    } else {
      sh.push_back(shape[k]);
      ss.push_back(s);
      ds.push_back(dst[k]);
    }
  }
  DPL_CHECK(sh.size() <= static_cast<std::size_t>(kMaxDims), op, ": a strided layout of shape ", shape_str(shape),
            " has ", sh.size(), " non-mergeable dimensions on the GPU; at most ", kMaxDims, " are supported");
  StridedLayout l;
  l.ndim = static_cast<int>(sh.size());
  for (int k = 0; k < l.ndim; ++k) {
    l.shape[k] = sh[static_cast<std::size_t>(k)];
    l.src_stride[k] = ss[static_cast<std::size_t>(k)];
    l.dst_stride[k] = ds[static_cast<std::size_t>(k)];
  }
  return l;
}

// ============================================================================================
// kernels
// ============================================================================================

// I is the index type: 32-bit where every index and offset of the copy fits (the common case),
// since a 64-bit division by a run-time extent costs several times a 32-bit one and the copy
// does one per dimension per element.
template <typename I = std::int64_t>
__device__ __forceinline__ void offsets(const StridedLayout& l, I i, I& so, I& dof) {
  so = 0;
  dof = 0;
  for (int k = l.ndim - 1; k >= 0; --k) {
    const auto extent = static_cast<I>(l.shape[k]);
    const I q = i / extent;
    const I r = i - q * extent;
    so += r * static_cast<I>(l.src_stride[k]);
    dof += r * static_cast<I>(l.dst_stride[k]);
    i = q;
  }
}

template <typename T, typename I>
__global__ void copy_strided_kernel(const T* src, T* dst, I n, StridedLayout l) {
  for (I i = static_cast<I>(global_thread()); i < n; i += static_cast<I>(grid_threads())) {
    I so, dof;
    offsets<I>(l, i, so, dof);
    dst[dof] = src[so];
  }
}

/// Most inputs one launch of the cat kernel joins; more take one launch per group of this many.
constexpr int kMaxCatInputs = 16;

/// A group of cat's inputs in units of U (an element, or 16 bytes): out viewed as (outer, out_row)
/// units, input k fills columns [start[k], start[k + 1]) of every row from its own rows of
/// start[k + 1] - start[k] units. Passed by value.
struct CatGroup {
  int count = 0;
  const void* src[kMaxCatInputs] = {};
  std::int64_t start[kMaxCatInputs + 1] = {};  // relative to start[0], the group's first column
  std::int64_t first = 0;                      // the group's first column in out's rows
  std::int64_t out_row = 0;
};

// One thread per unit of the group's columns of out, so the writes are coalesced; each finds its
// input by a scan of at most kMaxCatInputs column starts.
template <typename U, typename I>
__global__ void cat_kernel(CatGroup g, U* out, I n) {
  const auto width = static_cast<I>(g.start[g.count]);
  for (I i = static_cast<I>(global_thread()); i < n; i += static_cast<I>(grid_threads())) {
    const I o = i / width, c = i - o * width;
    int k = 0;
    while (c >= static_cast<I>(g.start[k + 1])) ++k;
    const auto lo = static_cast<I>(g.start[k]), row = static_cast<I>(g.start[k + 1]) - lo;
    out[static_cast<std::int64_t>(o) * g.out_row + g.first + c] = static_cast<const U*>(g.src[k])[o * row + c - lo];
  }
}

template <typename T>
__global__ void fill_kernel(T* dst, std::int64_t n, T value) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] = value;
}

template <typename T>
__global__ void fill_strided_kernel(T* dst, std::int64_t n, StridedLayout l, T value) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    std::int64_t so, dof;
    offsets(l, i, so, dof);
    dst[dof] = value;
  }
}

// ============================================================================================
// launchers
// ============================================================================================

/// Whether every index and offset of a copy of n elements in layout l fits in 32 bits (strides
/// are not negative).
bool fits_32_bits(std::int64_t n, const StridedLayout& l) {
  constexpr std::int64_t kMax = 0x7fffffff;
  std::int64_t src_end = 0, dst_end = 0;
  for (int k = 0; k < l.ndim; ++k) {
    if (l.src_stride[k] < 0 || l.dst_stride[k] < 0) return false;
    src_end += (l.shape[k] - 1) * l.src_stride[k];
    dst_end += (l.shape[k] - 1) * l.dst_stride[k];
  }
  return n <= kMax && src_end <= kMax && dst_end <= kMax;
}

template <typename T>
void launch_copy_strided_typed(const void* src, void* dst, std::int64_t n, const StridedLayout& l, int device,
                               cudaStream_t stream) {
  const unsigned grid = grid_for(n, kThreads, device);
  const auto* s = static_cast<const T*>(src);
  auto* d = static_cast<T*>(dst);
  if (fits_32_bits(n, l)) copy_strided_kernel<T, std::uint32_t><<<grid, kThreads, 0, stream>>>(s, d, n, l);
  else copy_strided_kernel<T, std::int64_t><<<grid, kThreads, 0, stream>>>(s, d, n, l);
  DPL_CUDA_CHECK(cudaGetLastError());
}

/// The layout of l in units of `width` elements, when its innermost dimension is contiguous in
/// both tensors and every extent and stride allows it (with 16-byte aligned pointers, the copy
/// then moves 16 bytes per thread: the rows of a cat along the last dimension or of a transpose of
/// middle dimensions). False otherwise.
bool widen(StridedLayout& l, std::int64_t width, const void* src, const void* dst) {
  const int last = l.ndim - 1;
  if (last < 0 || l.src_stride[last] != 1 || l.dst_stride[last] != 1 || l.shape[last] % width != 0) return false;
  if (!aligned16(src) || !aligned16(dst)) return false;
  for (int k = 0; k < last; ++k)
    if (l.src_stride[k] % width != 0 || l.dst_stride[k] % width != 0) return false;
  l.shape[last] /= width;
  for (int k = 0; k < last; ++k) {
    l.src_stride[k] /= width;
    l.dst_stride[k] /= width;
  }
  return true;
}

void launch_copy_strided(std::size_t elem, const void* src, void* dst, std::int64_t n, StridedLayout l,
                         int device, cudaStream_t stream) {
  const auto width = static_cast<std::int64_t>(16 / elem);
  if (elem <= 16 && 16 % elem == 0 && widen(l, width, src, dst)) {
    launch_copy_strided_typed<uint4>(src, dst, n / width, l, device, stream);
    return;
  }
  switch (elem) {
    case 1: launch_copy_strided_typed<std::uint8_t>(src, dst, n, l, device, stream); break;
    case 2: launch_copy_strided_typed<std::uint16_t>(src, dst, n, l, device, stream); break;
    case 4: launch_copy_strided_typed<std::uint32_t>(src, dst, n, l, device, stream); break;
    case 8: launch_copy_strided_typed<std::uint64_t>(src, dst, n, l, device, stream); break;
    default: DPL_FAIL("copy_strided: elements of ", elem, " bytes are not supported on the GPU");
  }
}

template <typename U>
void launch_cat_group(const CatGroup& g, void* out, std::int64_t outer, int device, cudaStream_t stream) {
  const std::int64_t n = outer * g.start[g.count];
  if (n == 0) return;
  const unsigned grid = grid_for(n, kThreads, device);
  if (n <= 0x7fffffff && outer * g.out_row <= 0x7fffffff)
    cat_kernel<U, std::uint32_t><<<grid, kThreads, 0, stream>>>(g, static_cast<U*>(out), static_cast<std::uint32_t>(n));
  else
    cat_kernel<U, std::int64_t><<<grid, kThreads, 0, stream>>>(g, static_cast<U*>(out), n);
  DPL_CUDA_CHECK(cudaGetLastError());
}

/// Joins rows of `rows[k]` bytes of src[k] into rows of out, outer rows in all, in units of U:
/// every length is a multiple of sizeof(U) (the caller checks).
template <typename U>
void launch_cat(const std::vector<const void*>& src, const std::vector<std::int64_t>& rows, void* out,
                std::int64_t outer, int device, cudaStream_t stream) {
  std::int64_t out_row = 0;
  for (std::int64_t r : rows) out_row += r;
  const auto unit = static_cast<std::int64_t>(sizeof(U));
  CatGroup g;
  g.out_row = out_row / unit;
  std::int64_t column = 0;
  for (std::size_t k = 0; k < src.size(); ++k) {
    if (g.count == kMaxCatInputs) {
      launch_cat_group<U>(g, out, outer, device, stream);
      g.count = 0;
      g.first = column;
    }
    g.src[g.count] = src[k];
    g.start[g.count + 1] = g.start[g.count] + rows[k] / unit;
    ++g.count;
    column += rows[k] / unit;
  }
  if (g.count > 0) launch_cat_group<U>(g, out, outer, device, stream);
}

template <typename T>
void launch_fill(void* dst, std::int64_t n, const StridedLayout* l, T value, int device, cudaStream_t stream) {
  const unsigned grid = grid_for(n, kThreads, device);
  if (l) fill_strided_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<T*>(dst), n, *l, value);
  else fill_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<T*>(dst), n, value);
  DPL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace cuda_detail

// ============================================================================================
// kernel implementations
// ============================================================================================

namespace {

using cuda_detail::DeviceGuard;

void copy_strided_cuda(const Tensor& src, Tensor& dst) {
  const std::int64_t n = src.numel();
  if (n == 0) return;
  const auto l = cuda_detail::merge_dims(src.shape(), &src.strides(), dst.strides(), "copy_strided");
  CudaDevice& d = cuda_device_of(src);
  DeviceGuard guard(d.device());
  cuda_detail::launch_copy_strided(dtype_size(src.dtype()), src.raw_data(), dst.raw_data(), n, l, d.device(),
                                   d.stream());
}

void cat_cuda(const std::vector<Tensor>& inputs, std::int64_t dim, Tensor& out) {
  if (out.numel() == 0) return;
  const auto es = static_cast<std::int64_t>(dtype_size(out.dtype()));
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t k = 0; k < dim; ++k) outer *= out.size(k);
  for (std::int64_t k = dim + 1; k < out.dim(); ++k) inner *= out.size(k);
  std::vector<const void*> src;
  std::vector<std::int64_t> rows;  // bytes
  bool wide = cuda_detail::aligned16(out.raw_data());
  for (const Tensor& in : inputs) {
    if (in.numel() == 0) continue;
    src.push_back(in.raw_data());
    rows.push_back(in.size(dim) * inner * es);
    wide = wide && rows.back() % 16 == 0 && cuda_detail::aligned16(in.raw_data());
  }
  CudaDevice& d = cuda_device_of(out);
  DeviceGuard guard(d.device());
  if (wide) {
    cuda_detail::launch_cat<uint4>(src, rows, out.raw_data(), outer, d.device(), d.stream());
    return;
  }
  switch (es) {
    case 1: cuda_detail::launch_cat<std::uint8_t>(src, rows, out.raw_data(), outer, d.device(), d.stream()); break;
    case 2: cuda_detail::launch_cat<std::uint16_t>(src, rows, out.raw_data(), outer, d.device(), d.stream()); break;
    case 4: cuda_detail::launch_cat<std::uint32_t>(src, rows, out.raw_data(), outer, d.device(), d.stream()); break;
    case 8: cuda_detail::launch_cat<std::uint64_t>(src, rows, out.raw_data(), outer, d.device(), d.stream()); break;
    default: DPL_FAIL("cat: elements of ", es, " bytes are not supported on the GPU");
  }
}

void fill_cuda(Tensor& t, double value) {
  const std::int64_t n = t.numel();
  if (n == 0) return;
  // The element's bit pattern; fills move bits, not numbers.
  std::uint64_t bits = 0;
  switch (t.dtype()) {
    case DType::kFloat32: {
      const auto v = static_cast<float>(value);
      std::uint32_t b;
      std::memcpy(&b, &v, 4);
      bits = b;
      break;
    }
    case DType::kInt32: bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(value)); break;
    case DType::kInt64: bits = static_cast<std::uint64_t>(static_cast<std::int64_t>(value)); break;
    case DType::kUInt8: bits = static_cast<std::uint8_t>(value); break;
    case DType::kBFloat16: bits = dpl::detail::float_to_bfloat16(static_cast<float>(value)); break;
    case DType::kFloat16: bits = dpl::detail::float_to_float16(static_cast<float>(value)); break;
  }
  CudaDevice& d = cuda_device_of(t);
  DeviceGuard guard(d.device());
  if (t.is_contiguous() && bits == 0) {
    DPL_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), d.stream()));
    return;
  }
  cuda_detail::StridedLayout layout;
  const cuda_detail::StridedLayout* l = nullptr;
  if (!t.is_contiguous()) {
    layout = cuda_detail::merge_dims(t.shape(), nullptr, t.strides(), "fill");
    l = &layout;
  }
  switch (dtype_size(t.dtype())) {
    case 1:
      cuda_detail::launch_fill<std::uint8_t>(t.raw_data(), n, l, static_cast<std::uint8_t>(bits), d.device(),
                                             d.stream());
      break;
    case 2:
      cuda_detail::launch_fill<std::uint16_t>(t.raw_data(), n, l, static_cast<std::uint16_t>(bits), d.device(),
                                              d.stream());
      break;
    case 4:
      cuda_detail::launch_fill<std::uint32_t>(t.raw_data(), n, l, static_cast<std::uint32_t>(bits), d.device(),
                                              d.stream());
      break;
    default: cuda_detail::launch_fill<std::uint64_t>(t.raw_data(), n, l, bits, d.device(), d.stream()); break;
  }
}

}  // namespace

DPL_REGISTER_KERNEL(copy_strided, kCuda, copy_strided_cuda);
DPL_REGISTER_KERNEL(cat, kCuda, cat_cuda);
DPL_REGISTER_KERNEL(fill, kCuda, fill_cuda);

}  // namespace dpl::backend
