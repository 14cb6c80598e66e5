#pragma once
// Constructors behind create_communicator's table (src/comm/communicator.cpp). Each is defined
// only in the builds whose table names it.

#include <memory>
#include <string>

#include "dpl/comm/communicator.hpp"
#include "dpl/config.hpp"

namespace dpl::comm::detail {

#if DPL_WITH_MPI
/// Collectives straight over a duplicate of MPI_COMM_WORLD (src/comm/mpi/mpi_communicator.cpp).
std::unique_ptr<Communicator> make_naive(const std::string& name);
/// Intra-node reduce, inter-node allreduce, intra-node broadcast (src/comm/mpi/hierarchical_communicator.cpp).
std::unique_ptr<Communicator> make_hierarchical(const std::string& name);
#else
/// The whole job is this one process (src/comm/single_communicator.cpp).
std::unique_ptr<Communicator> make_single(const std::string& name);
#endif
/// Wraps a host communicator so that it also accepts CUDA tensors, staged through pinned host
/// memory (src/comm/staging_communicator.cpp).
std::unique_ptr<Communicator> make_staging(std::unique_ptr<Communicator> inner);

}  // namespace dpl::comm::detail
