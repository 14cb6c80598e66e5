#pragma once
// MPI has no bfloat16/float16 reduction; the staged inter-node step of a 16-bit allreduce needs
// one. These sums add in float and round back to nearest even, as NCCL does.

#include <mpi.h>

#include "dpl/core/dtype.hpp"

namespace dpl::comm::detail {

/// The MPI sum for dtype: a user-defined operation for kBFloat16 and kFloat16 (created on first
/// use, kept for the process; it runs on the host and cannot read device memory), MPI_SUM for
/// every other dtype. Requires MPI to be initialised.
MPI_Op mpi_sum_op(DType dtype);

}  // namespace dpl::comm::detail
