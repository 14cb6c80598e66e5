// The one-element int64 counter of BatchNorm2d (its count of training batches). A plain kernel of
// its own, not a part of the batch-norm library's files: the counter works in every build, with
// or without oneDNN.
#include <cstdint>

#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend {

namespace {

void increment_count_cpu(Tensor& counter) {
  DPL_CHECK(counter.dtype() == kInt64 && counter.numel() == 1, "increment_count: expected one int64 element, got ",
            counter.dtype(), " of shape ", shape_str(counter.shape()));
  ++*counter.data<std::int64_t>();
}

}  // namespace

DPL_REGISTER_KERNEL(increment_count, kCpu, increment_count_cpu);

}  // namespace dpl::backend
