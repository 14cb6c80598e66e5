// CPU memory and data movement: allocation, copies and fills of any dtype.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "backend/cpu/cpu.hpp"
#include "backend/cpu/host_cache.hpp"
#include "core/half.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend::cpu {

namespace {

void* allocate_cpu(Device, std::size_t nbytes) { return host_cache_allocate(nbytes); }

void deallocate_cpu(Device, void* p) { host_cache_free(p); }

void copy_bytes_cpu(Device, void* dst, const void* src, std::size_t nbytes) {
  if (nbytes) std::memmove(dst, src, nbytes);
}

void synchronize_cpu(Device) {}

// out viewed as (outer, out's extent at dim * inner): each input fills its run of every row.
void cat_cpu(const std::vector<Tensor>& inputs, std::int64_t dim, Tensor& out) {
  const std::size_t es = dtype_size(out.dtype());
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t k = 0; k < dim; ++k) outer *= out.size(k);
  for (std::int64_t k = dim + 1; k < out.dim(); ++k) inner *= out.size(k);
  const auto out_row = static_cast<std::size_t>(out.size(dim) * inner) * es;
  char* d = static_cast<char*>(out.raw_data());
  std::size_t start = 0;
  for (const Tensor& in : inputs) {
    const auto row = static_cast<std::size_t>(in.size(dim) * inner) * es;
    const char* s = static_cast<const char*>(in.raw_data());
    for (std::int64_t o = 0; o < outer && row > 0; ++o) {
      const auto uo = static_cast<std::size_t>(o);
      std::memcpy(d + uo * out_row + start, s + uo * row, row);
    }
    start += row;
  }
}

void copy_strided_cpu(const Tensor& src, Tensor& dst) {
  const std::size_t es = dtype_size(src.dtype());
  const std::int64_t n = src.numel();
  const std::int64_t nd = src.dim();
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(dst.raw_data());
  std::vector<std::int64_t> idx(static_cast<std::size_t>(nd), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t so = 0, dof = 0;
    for (std::int64_t k = 0; k < nd; ++k) {
      so += idx[k] * src.strides()[k];
      dof += idx[k] * dst.strides()[k];
    }
    std::memcpy(d + dof * static_cast<std::int64_t>(es), s + so * static_cast<std::int64_t>(es), es);
    for (std::int64_t k = nd - 1; k >= 0; --k) {
      if (++idx[k] < src.shape()[k]) break;
      idx[k] = 0;
    }
  }
}

template <typename T>
void fill_typed(Tensor& t, T v) {
  T* p = static_cast<T*>(t.raw_data());
  const std::int64_t n = t.numel();
  if (t.is_contiguous()) {
#pragma omp parallel for simd if (n > kParallelGrain) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) p[i] = v;
    return;
  }
  Tensor tmp = Tensor::empty(t.shape(), t.dtype());
  T* q = static_cast<T*>(tmp.raw_data());
  for (std::int64_t i = 0; i < n; ++i) q[i] = v;
  copy_strided_cpu(tmp, t);
}

void fill_cpu(Tensor& t, double value) {
  switch (t.dtype()) {
    case DType::kFloat32: fill_typed<float>(t, static_cast<float>(value)); break;
    case DType::kBFloat16: fill_typed<std::uint16_t>(t, dpl::detail::float_to_bfloat16(static_cast<float>(value))); break;
    case DType::kFloat16: fill_typed<std::uint16_t>(t, dpl::detail::float_to_float16(static_cast<float>(value))); break;
    case DType::kInt32: fill_typed<std::int32_t>(t, static_cast<std::int32_t>(value)); break;
    case DType::kInt64: fill_typed<std::int64_t>(t, static_cast<std::int64_t>(value)); break;
    case DType::kUInt8: fill_typed<std::uint8_t>(t, static_cast<std::uint8_t>(value)); break;
  }
}

void write_values_cpu(Tensor& dst, const std::vector<float>& values) {
  DPL_CHECK(dst.is_contiguous() && dst.numel() == static_cast<std::int64_t>(values.size()),
            "write_values: expected a contiguous destination of ", values.size(), " elements, got ", dst.numel());
  std::memcpy(dst.raw_data(), values.data(), values.size() * sizeof(float));
}

// The CPU has nothing in flight: the values are read at once.
class ReadValues final : public PendingRead {
 public:
  explicit ReadValues(std::vector<float> values) : values_(std::move(values)) {}
  std::vector<float> wait() override { return values_; }

 private:
  std::vector<float> values_;
};

std::shared_ptr<PendingRead> read_back_start_cpu(const Tensor& src) {
  DPL_CHECK(src.is_contiguous(), "read_back_start: expected a contiguous tensor");
  const auto* p = static_cast<const float*>(src.raw_data());
  return std::make_shared<ReadValues>(std::vector<float>(p, p + src.numel()));
}

}  // namespace

DPL_REGISTER_KERNEL(read_back_start, kCpu, read_back_start_cpu);
DPL_REGISTER_KERNEL(write_values, kCpu, write_values_cpu);
DPL_REGISTER_KERNEL(allocate, kCpu, allocate_cpu);
DPL_REGISTER_KERNEL(deallocate, kCpu, deallocate_cpu);
DPL_REGISTER_KERNEL(copy_bytes, kCpu, copy_bytes_cpu);
DPL_REGISTER_KERNEL(synchronize, kCpu, synchronize_cpu);
DPL_REGISTER_KERNEL(copy_strided, kCpu, copy_strided_cpu);
DPL_REGISTER_KERNEL(cat, kCpu, cat_cpu);
DPL_REGISTER_KERNEL(fill, kCpu, fill_cpu);

}  // namespace dpl::backend::cpu
