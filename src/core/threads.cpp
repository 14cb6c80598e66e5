#include "dpl/core/threads.hpp"

#include <omp.h>

#include <Eigen/Core>

#include "dpl/core/error.hpp"

namespace dpl {

void set_num_threads(int n) {
  DPL_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
  // Eigen's GEMM and our own loops both run on OpenMP; keep them on the same count.
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace dpl
