// Indexing along one dimension on the GPU: index_select and its index_add, gather and its
// scatter_add, for float32, bfloat16 and float16 values and int64 or int32 indices.
//
// The backward kernels add with float32 atomics (atomicAdd on float): a float32 gradient
// directly, a 16-bit one in a float32 copy that is rounded back once after all the additions, so
// a row that many indices hit sums in float32 as the conventions of kernels.hpp require. The
// order of the atomic additions is not fixed, so a float32 sum over repeated indices may differ
// in its last bits from run to run; the deterministic alternative (sorting the indices and
// summing each run of equal ones) costs a sort per step and is not needed by any op yet.
// Indices are not range-checked on the device (that would stall every step): the forward
// kernels write NaN for an index out of range and the backward kernels skip it.
#include <math_constants.h>

#include <cstdint>

#include "backend/cuda/cast.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/index_geometry.hpp"
#include "backend/kernels.hpp"

namespace dpl::backend {

namespace cuda_detail {
namespace {

constexpr int kMaxGatherRank = 8;

// gather's and scatter_add's view of index (its extents) and of x (its contiguous strides).
struct GatherGeometry {
  int rank = 0;
  int dim = 0;
  std::int64_t x_extent = 0;  // x's extent at dim, the valid range of an index
  std::int64_t index_shape[kMaxGatherRank] = {};
  std::int64_t x_strides[kMaxGatherRank] = {};
};

// ============================================================================================
// kernels
// ============================================================================================

// Each thread copies V elements of a row (16 bytes as one access when V > 1: rows of embeddings
// are long and aligned), or writes V NaNs for an index out of range. inner is a multiple of V;
// packs is the output's element count / V.
template <int V, typename T, typename I>
__global__ void index_select_kernel(const T* x, const I* index, T* out, std::int64_t n, std::int64_t m,
                                    std::int64_t inner, std::int64_t packs) {
  const std::int64_t packs_per_row = inner / V;
  for (std::int64_t p = global_thread(); p < packs; p += grid_threads()) {
    const std::int64_t r = p / packs_per_row, k = (p - r * packs_per_row) * V;
    const std::int64_t o = r / m, j = r - o * m;
    const std::int64_t v = index[j];
    T* dst = out + p * V;
    if (v < 0 || v >= n) {
#pragma unroll
      for (int e = 0; e < V; ++e) dst[e] = from_float<T>(CUDART_NAN_F);
      continue;
    }
    const T* src = x + (o * n + v) * inner + k;
    if constexpr (V > 1) {
      static_assert(V * sizeof(T) == 16, "a pack is 16 bytes");
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      dst[0] = src[0];
    }
  }
}

template <typename T, typename I>
__global__ void index_add_kernel(const I* index, std::int64_t skip, const T* g, float* acc, std::int64_t n,
                                 std::int64_t m, std::int64_t inner, std::int64_t total) {
  for (std::int64_t i = global_thread(); i < total; i += grid_threads()) {
    const std::int64_t r = i / inner, k = i - r * inner;
    const std::int64_t o = r / m, j = r - o * m;
    const std::int64_t v = index[j];
    if (v < 0 || v >= n || v == skip) continue;
    atomicAdd(acc + (o * n + v) * inner + k, to_float(g[i]));
  }
}

// The offset into x of element i of index, without the indexed dimension's term.
__device__ __forceinline__ std::int64_t gather_base(const GatherGeometry& geo, std::int64_t i) {
  std::int64_t off = 0;
  for (int d = geo.rank - 1; d >= 0; --d) {
    const std::int64_t c = i % geo.index_shape[d];
    i /= geo.index_shape[d];
    if (d != geo.dim) off += c * geo.x_strides[d];
  }
  return off;
}

template <typename T, typename I>
__global__ void gather_kernel(const T* x, const I* index, T* out, GatherGeometry geo, std::int64_t total) {
  for (std::int64_t i = global_thread(); i < total; i += grid_threads()) {
    const std::int64_t v = index[i];
    out[i] = (v >= 0 && v < geo.x_extent) ? x[gather_base(geo, i) + v * geo.x_strides[geo.dim]]
                                          : from_float<T>(CUDART_NAN_F);
  }
}

template <typename T, typename I>
__global__ void scatter_add_kernel(const I* index, const T* g, float* acc, GatherGeometry geo, std::int64_t total) {
  for (std::int64_t i = global_thread(); i < total; i += grid_threads()) {
    const std::int64_t v = index[i];
    if (v < 0 || v >= geo.x_extent) continue;
    atomicAdd(acc + gather_base(geo, i) + v * geo.x_strides[geo.dim], to_float(g[i]));
  }
}

// ============================================================================================
// launchers
// ============================================================================================

// Launches kernel(args..., total) over a grid-stride loop of `total` items (every kernel of this
// file has that form) and checks the launch.
template <typename... Params, typename... Args>
void launch_over(std::int64_t total, int device, cudaStream_t stream, void (*kernel)(Params...), Args... args) {
  if (total == 0) return;
  kernel<<<grid_for(total, kThreads, device), kThreads, 0, stream>>>(args..., total);
  DPL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace cuda_detail

// ============================================================================================
// kernel implementations
// ============================================================================================

namespace {

using cuda_detail::in_ptr;
using cuda_detail::on_device_typed;
using cuda_detail::out_ptr;
using cuda_detail::TypeTag;

// Checks that the float tensors share one dtype, then calls f(TypeTag<T>, TypeTag<I>, device)
// with T the values' device type and I the index type.
template <typename F>
void on_device_indexed(const char* kernel, const Tensor& values, const Tensor& other, const Tensor& index, F&& f) {
  DPL_CHECK(other.dtype() == values.dtype(), kernel, ": expected values of one dtype, got ", values.dtype(), " and ",
            other.dtype());
  DPL_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, kernel,
            ": expected an index of dtype int64 or int32, got ", index.dtype());
  on_device_typed(values, kernel, [&](auto tag, CudaDevice& d) {
    if (index.dtype() == kInt64) f(tag, TypeTag<std::int64_t>{}, d);
    else f(tag, TypeTag<std::int32_t>{}, d);
  });
}

// Runs add(acc), which atomically adds float32 values into acc, an array of gx's elements, and
// leaves gx = beta*gx + the additions: in gx itself for float32, else in a float32 copy rounded
// back once.
template <typename T, typename Add>
void accumulate_in_float32(Tensor& gx, float beta, CudaDevice& d, Add&& add) {
  const std::size_t bytes = static_cast<std::size_t>(gx.numel()) * sizeof(float);
  if constexpr (std::is_same_v<T, float>) {
    if (beta == 0.f) DPL_CUDA_CHECK(cudaMemsetAsync(gx.raw_data(), 0, bytes, d.stream()));
    add(out_ptr<float>(gx));
  } else {
    Tensor acc = Tensor::empty(gx.shape(), TensorOptions(kFloat32, gx.device()));
    if (beta == 0.f) DPL_CUDA_CHECK(cudaMemsetAsync(acc.raw_data(), 0, bytes, d.stream()));
    else cuda_detail::launch_cast(gx.raw_data(), gx.dtype(), acc.raw_data(), kFloat32, gx.numel(), 1.f, d.device(),
                                  d.stream());
    add(out_ptr<float>(acc));
    cuda_detail::launch_cast(acc.raw_data(), kFloat32, gx.raw_data(), gx.dtype(), gx.numel(), 1.f, d.device(),
                             d.stream());
  }
}

cuda_detail::GatherGeometry gather_geometry(const Tensor& x, std::int64_t dim, const Tensor& index,
                                            const char* kernel) {
  DPL_CHECK(index.dim() <= cuda_detail::kMaxGatherRank && index.dim() == x.dim(), kernel,
            ": expected an index of the values' rank (at most ", cuda_detail::kMaxGatherRank, "), got shapes ",
            shape_str(index.shape()), " and ", shape_str(x.shape()));
  cuda_detail::GatherGeometry geo;
  geo.rank = static_cast<int>(index.dim());
  geo.dim = static_cast<int>(dim);
  geo.x_extent = x.size(dim);
  const Strides xs = contiguous_strides(x.shape());
  for (int d = 0; d < geo.rank; ++d) {
    geo.index_shape[d] = index.size(d);
    geo.x_strides[d] = xs[static_cast<std::size_t>(d)];
  }
  return geo;
}

void index_select_cuda(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) {
  on_device_indexed("index_select", x, out, index, [&](auto tag, auto itag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    using I = typename decltype(itag)::type;
    const IndexedDims s = indexed_dims(x.shape(), dim);
    const std::int64_t m = index.numel();
    constexpr int kV = cuda_detail::kPack<T>;
    const bool packed =
        s.inner % kV == 0 && cuda_detail::aligned16(x.raw_data()) && cuda_detail::aligned16(out.raw_data());
    const std::int64_t total = s.outer * m * s.inner;
    if (packed)
      cuda_detail::launch_over(total / kV, d.device(), d.stream(), cuda_detail::index_select_kernel<kV, T, I>,
                               in_ptr<T>(x), in_ptr<I>(index), out_ptr<T>(out), s.mid, m, s.inner);
    else
      cuda_detail::launch_over(total, d.device(), d.stream(), cuda_detail::index_select_kernel<1, T, I>,
                               in_ptr<T>(x), in_ptr<I>(index), out_ptr<T>(out), s.mid, m, s.inner);
  });
}

void index_add_cuda(const Tensor& index, std::int64_t dim, std::int64_t skip, const Tensor& g, float beta,
                    Tensor& gx) {
  on_device_indexed("index_add", gx, g, index, [&](auto tag, auto itag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    using I = typename decltype(itag)::type;
    const IndexedDims s = indexed_dims(gx.shape(), dim);
    accumulate_in_float32<T>(gx, beta, d, [&](float* acc) {
      const std::int64_t m = index.numel();
      cuda_detail::launch_over(s.outer * m * s.inner, d.device(), d.stream(), cuda_detail::index_add_kernel<T, I>,
                               in_ptr<I>(index), skip, in_ptr<T>(g), acc, s.mid, m, s.inner);
    });
  });
}

void gather_cuda(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) {
  on_device_indexed("gather", x, out, index, [&](auto tag, auto itag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    using I = typename decltype(itag)::type;
    cuda_detail::launch_over(index.numel(), d.device(), d.stream(), cuda_detail::gather_kernel<T, I>, in_ptr<T>(x),
                             in_ptr<I>(index), out_ptr<T>(out), gather_geometry(x, dim, index, "gather"));
  });
}

void scatter_add_cuda(const Tensor& index, std::int64_t dim, const Tensor& g, float beta, Tensor& gx) {
  on_device_indexed("scatter_add", gx, g, index, [&](auto tag, auto itag, CudaDevice& d) {
    using T = typename decltype(tag)::type;
    using I = typename decltype(itag)::type;
    const cuda_detail::GatherGeometry geo = gather_geometry(gx, dim, index, "scatter_add");
    accumulate_in_float32<T>(gx, beta, d, [&](float* acc) {
      cuda_detail::launch_over(index.numel(), d.device(), d.stream(), cuda_detail::scatter_add_kernel<T, I>,
                               in_ptr<I>(index), in_ptr<T>(g), acc, geo);
    });
  });
}

}  // namespace

DPL_REGISTER_KERNEL(index_select, kCuda, index_select_cuda);
DPL_REGISTER_KERNEL(index_add, kCuda, index_add_cuda);
DPL_REGISTER_KERNEL(gather, kCuda, gather_cuda);
DPL_REGISTER_KERNEL(scatter_add, kCuda, scatter_add_cuda);

}  // namespace dpl::backend
