// dist_lifecycle_probe: a program that leaves MPI to the library. It creates communicators,
// communicates, and returns; the library must have initialised MPI and must finalise it at exit,
// so the job ends with status 0 (mpiexec fails a job whose ranks exit without MPI_Finalize).

#include <cstdio>

#include "dpl/comm.hpp"

int main() {
  auto naive = dpl::comm::create_communicator("naive");
  auto hier = dpl::comm::create_communicator("hierarchical");
  dpl::Tensor buf = dpl::Tensor::ones({100});
  hier->allreduce(buf);
  naive->allreduce(buf, dpl::comm::ReduceOp::kMean);
  const bool ok = buf.to_vector<float>().front() == static_cast<float>(naive->size());
  if (naive->rank() == 0) std::printf("lifecycle probe: %s\n", ok ? "ok" : "wrong result");
  return ok ? 0 : 1;
}
