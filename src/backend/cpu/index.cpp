// Indexing along one dimension on the CPU: index_select and its index_add, gather and its
// scatter_add. Float32 functions (16-bit tensors run them widened, cpu.hpp); indices int64 or
// int32. The adds run in index order, so repeated indices sum the same way on every run.
#include <array>
#include <cstring>

#include "backend/cpu/cpu.hpp"
#include "backend/index_geometry.hpp"

namespace dpl::backend::cpu {

namespace {

// Index tensor i's element j as int64, whichever of the two index dtypes it holds.
class IndexReader {
 public:
  explicit IndexReader(const Tensor& index, const char* kernel)
      : i64_(index.dtype() == kInt64 ? index.data<std::int64_t>() : nullptr),
        i32_(index.dtype() == kInt32 ? index.data<std::int32_t>() : nullptr) {
    DPL_CHECK(i64_ != nullptr || i32_ != nullptr, kernel, ": expected an index of dtype int64 or int32, got ",
              index.dtype());
  }
  std::int64_t operator[](std::int64_t j) const { return i64_ != nullptr ? i64_[j] : i32_[j]; }

 private:
  const std::int64_t* i64_;
  const std::int32_t* i32_;
};

void check_index(std::int64_t v, std::int64_t extent, const char* kernel) {
  DPL_CHECK(v >= 0 && v < extent, kernel, ": index ", v, " is out of range for a dimension of extent ", extent);
}

void index_select_cpu(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) {
  const IndexReader idx(index, "index_select");
  const IndexedDims in = indexed_dims(x.shape(), dim);
  const std::int64_t m = index.numel();
  for (std::int64_t j = 0; j < m; ++j) check_index(idx[j], in.mid, "index_select");
  const float* px = x.data<float>();
  float* po = out.data<float>();
  const std::size_t row_bytes = static_cast<std::size_t>(in.inner) * sizeof(float);
  for_each_index(in.outer * m, [&](std::int64_t r) {
    const std::int64_t o = r / m, j = r - o * m;
    std::memcpy(po + r * in.inner, px + (o * in.mid + idx[j]) * in.inner, row_bytes);
  });
}

void index_add_cpu(const Tensor& index, std::int64_t dim, std::int64_t skip, const Tensor& g, float beta,
                   Tensor& gx) {
  const IndexReader idx(index, "index_add");
  const IndexedDims out = indexed_dims(gx.shape(), dim);
  const std::int64_t m = index.numel();
  for (std::int64_t j = 0; j < m; ++j) check_index(idx[j], out.mid, "index_add");
  float* pgx = gx.data<float>();
  const float* pg = g.data<float>();
  if (beta == 0.f) std::memset(pgx, 0, static_cast<std::size_t>(gx.numel()) * sizeof(float));
  // Each outer slice is written by one thread, in index order within it.
  for_each_index(out.outer, [&](std::int64_t o) {
    for (std::int64_t j = 0; j < m; ++j) {
      const std::int64_t row = idx[j];
      if (row == skip) continue;
      float* dst = pgx + (o * out.mid + row) * out.inner;
      const float* src = pg + (o * m + j) * out.inner;
      for (std::int64_t k = 0; k < out.inner; ++k) dst[k] += src[k];
    }
  });
}

// Calls f(flat position in index/g, offset into x) for every element of index, in order.
template <typename F>
void for_each_gathered(const Tensor& x, std::int64_t dim, const Tensor& index, const char* kernel, F&& f) {
  const IndexReader idx(index, kernel);
  const Shape& is = index.shape();
  const auto rank = static_cast<std::int64_t>(is.size());
  const Strides xs = contiguous_strides(x.shape());
  std::array<std::int64_t, 8> coord{};
  for (std::int64_t i = 0; i < index.numel(); ++i) {
    const std::int64_t v = idx[i];
    check_index(v, x.size(dim), kernel);
    std::int64_t off = 0;
    for (std::int64_t d = 0; d < rank; ++d) off += (d == dim ? v : coord[static_cast<std::size_t>(d)]) * xs[d];
    f(i, off);
    for (std::int64_t d = rank - 1; d >= 0; --d) {  // next coordinate, row-major
      if (++coord[static_cast<std::size_t>(d)] < is[d]) break;
      coord[static_cast<std::size_t>(d)] = 0;
    }
  }
}

void gather_cpu(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) {
  const float* px = x.data<float>();
  float* po = out.data<float>();
  for_each_gathered(x, dim, index, "gather", [&](std::int64_t i, std::int64_t off) { po[i] = px[off]; });
}

void scatter_add_cpu(const Tensor& index, std::int64_t dim, const Tensor& g, float beta, Tensor& gx) {
  float* pgx = gx.data<float>();
  const float* pg = g.data<float>();
  if (beta == 0.f) std::memset(pgx, 0, static_cast<std::size_t>(gx.numel()) * sizeof(float));
  for_each_gathered(gx, dim, index, "scatter_add", [&](std::int64_t i, std::int64_t off) { pgx[off] += pg[i]; });
}

}  // namespace

DPL_REGISTER_CPU_FLOAT_KERNEL(index_select, index_select_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(index_add, index_add_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(gather, gather_cpu);
DPL_REGISTER_CPU_FLOAT_KERNEL(scatter_add, scatter_add_cpu);

}  // namespace dpl::backend::cpu
