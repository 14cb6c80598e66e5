// dist_abort_probe: rank 1 throws a dpl::Error nobody catches while every other rank waits in a
// collective. The library must print "rank 1: <message>" and bring the whole job down, quickly
// (checked by run_abort_probe.cmake). With "exit" as argument rank 1 instead returns 3 from main
// after create_communicator, which must also end the job rather than leave it hanging.

#include <cstring>

#include "dpl/comm.hpp"

int main(int argc, char** argv) {
  const bool by_exit = argc > 1 && std::strcmp(argv[1], "exit") == 0;
  auto comm = dpl::comm::create_communicator("hierarchical");
  if (comm->rank() == 1) {
    if (by_exit) return 3;
    throw dpl::Error("abort probe: deliberate failure on one rank");
  }
  dpl::Tensor buf = dpl::Tensor::ones({1024});
  comm->allreduce(buf);  // never completes: rank 1 does not take part
  return 0;
}
