// dist_watchdog_probe: one rank stops taking part while the others wait in a collective; the
// collective watchdog (DPL_COLLECTIVE_TIMEOUT, a few seconds in the tests) must report the
// collective, its sequence number and the missing rank, and end the job (checked by
// run_abort_probe.cmake). Collective #1 is create_communicator, #2 the first allreduce, and the
// others wait in allreduce #3 while rank 1
//   stop:  stops itself (SIGSTOP), as a debugger or a swapped-out node would;
//   sleep: sleeps far beyond the deadline outside any collective (a rank that took another,
//          slower path through the program);
//   funneled: as sleep, in a program that initialised MPI itself with MPI_THREAD_FUNNELED, where
//          the watchdog cannot ask the other ranks and ends its own process instead.

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>

#include "dpl/comm.hpp"

int main(int argc, char** argv) {
  const bool stop = argc > 1 && std::strcmp(argv[1], "stop") == 0;
  if (argc > 1 && std::strcmp(argv[1], "funneled") == 0) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  }
  auto comm = dpl::comm::create_communicator("hierarchical");
  dpl::Tensor buf = dpl::Tensor::ones({1024});
  comm->allreduce(buf);
  if (comm->rank() == 1) {
    if (stop) raise(SIGSTOP);
    sleep(120);  // the job is aborted long before
    return 0;
  }
  comm->allreduce(buf);  // never completes: rank 1 does not take part
  return 0;
}
