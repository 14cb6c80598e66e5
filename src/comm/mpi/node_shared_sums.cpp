#include "comm/mpi/node_shared_sums.hpp"

#include <algorithm>
#include <cstring>

#include "dpl/core/error.hpp"

namespace dpl::comm::detail {

namespace {

// Blocks keep the partial sums in L1 between sources. With `streaming`, each block is added up in
// a buffer on the stack (in L1) and then streamed into dst. A is the type the addition happens in.
template <typename A>
void add_sources(char* dst_bytes, const char* const* src_bytes, int count, std::int64_t n, bool streaming) {
  constexpr std::int64_t kBlock = 2048;
  A block[kBlock];
  A* __restrict dst = reinterpret_cast<A*>(dst_bytes);
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t m = std::min(kBlock, n - b);
    const A* __restrict s0 = reinterpret_cast<const A*>(src_bytes[0]) + b;
    A* __restrict d = streaming ? block : dst + b;
    const std::size_t bytes = static_cast<std::size_t>(m) * sizeof(A);
    if (count == 1) {
      store_copy(reinterpret_cast<char*>(dst + b), reinterpret_cast<const char*>(s0), bytes, streaming);
      continue;
    }
    const A* __restrict s1 = reinterpret_cast<const A*>(src_bytes[1]) + b;
    for (std::int64_t j = 0; j < m; ++j) d[j] = s0[j] + s1[j];
    for (int r = 2; r < count; ++r) {
      const A* __restrict s = reinterpret_cast<const A*>(src_bytes[r]) + b;
      for (std::int64_t j = 0; j < m; ++j) d[j] += s[j];
    }
    if (streaming) store_copy(reinterpret_cast<char*>(dst + b), reinterpret_cast<const char*>(block), bytes, true);
  }
}

}  // namespace

void store_copy(char* dst, const char* src, std::size_t n, bool streaming) {
#if defined(__SSE2__)
  if (streaming) {
    std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16;
    if (head > n) head = n;
    std::memcpy(dst, src, head);
    std::size_t i = head;
    for (; i + 64 <= n; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    for (; i + 16 <= n; i += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    std::memcpy(dst + i, src + i, n - i);
    return;
  }
#endif
  (void)streaming;
  std::memcpy(dst, src, n);
}

void add_sources(DType dtype, char* dst, const char* const* src, int count, std::int64_t n, bool streaming) {
  switch (dtype) {
    case DType::kFloat32: return add_sources<float>(dst, src, count, n, streaming);
    case DType::kInt32: return add_sources<std::uint32_t>(dst, src, count, n, streaming);
    case DType::kInt64: return add_sources<std::uint64_t>(dst, src, count, n, streaming);
    default: DPL_FAIL("shared-memory allreduce: expected a float32, int32 or int64 buffer, got ", dtype);
  }
}

void divide(char* bytes, std::int64_t n, int divisor) {
  float* p = reinterpret_cast<float*>(bytes);
  const float d = static_cast<float>(divisor);
  for (std::int64_t i = 0; i < n; ++i) p[i] /= d;
}

}  // namespace dpl::comm::detail
