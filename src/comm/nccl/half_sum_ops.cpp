#include "comm/nccl/half_sum_ops.hpp"

#include <cstdint>
#include <cstring>

namespace dpl::comm::detail {

namespace {

float bf16_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

void sum_fp16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const _Float16*>(in);
  auto* b = static_cast<_Float16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = static_cast<_Float16>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

}  // namespace

MPI_Op mpi_sum_op(DType dtype) {
  static MPI_Op bf16 = MPI_OP_NULL, fp16 = MPI_OP_NULL;
  if (dtype == kBFloat16) {
    if (bf16 == MPI_OP_NULL) MPI_Op_create(&sum_bf16, 1, &bf16);
    return bf16;
  }
  if (dtype == kFloat16) {
    if (fp16 == MPI_OP_NULL) MPI_Op_create(&sum_fp16, 1, &fp16);
    return fp16;
  }
  return MPI_SUM;
}

}  // namespace dpl::comm::detail
