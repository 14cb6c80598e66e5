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
/// Reduce-scatter in the node, allreduce of each slice across nodes, allgather in the node
/// (src/comm/mpi/two_dimensional_communicator.cpp).
std::unique_ptr<Communicator> make_two_dimensional(const std::string& name);
#else
/// The whole job is this one process (src/comm/single_communicator.cpp).
std::unique_ptr<Communicator> make_single(const std::string& name);
#endif
/// Wraps a host communicator so that it also accepts CUDA tensors, staged through pinned host
/// memory (src/comm/staging_communicator.cpp).
std::unique_ptr<Communicator> make_staging(std::unique_ptr<Communicator> inner);
#if DPL_WITH_NCCL
/// Wraps the MPI communicator `host` (which it uses for host buffers and for its MPI steps) into
/// the device communicator `name` (pure_nccl, single_node, hierarchical, two_dimensional, flat):
/// NCCL inside nodes, pipelined staged (or CUDA-aware) MPI across them (src/comm/nccl/).
std::unique_ptr<Communicator> make_device(std::unique_ptr<Communicator> host, const std::string& name,
                                          const CommOptions& options);
#endif

}  // namespace dpl::comm::detail
