#pragma once
// How many CPU threads dpl's host kernels (Eigen GEMM, elementwise loops) use.

namespace dpl {

/// Sets the number of threads host kernels use; requires n >= 1.
void set_num_threads(int n);
/// The number of threads host kernels use now.
int num_threads();

}  // namespace dpl
