#include "comm/nccl/half_sum_ops.hpp"

#include <cstdint>

#include "core/half.hpp"

namespace dpl::comm::detail {

namespace {

void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = dpl::detail::float_to_bfloat16(dpl::detail::bfloat16_to_float(a[i]) + dpl::detail::bfloat16_to_float(b[i]));
}

void sum_fp16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = dpl::detail::float_to_float16(dpl::detail::float16_to_float(a[i]) + dpl::detail::float16_to_float(b[i]));
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
