#pragma once
// Constructors behind create_communicator's table (src/comm/communicator.cpp). Each is defined
// only in the builds whose table names it.

#include <memory>
#include <string>

#include "dpl/comm/communicator.hpp"
#include "dpl/config.hpp"
#if DPL_WITH_MPI
#include "comm/mpi/mpi_communicator.hpp"
#endif

namespace dpl::comm::detail {

#if DPL_WITH_MPI
/// What a host maker returns: the device makers need its MPI groups.
using HostCommunicator = MpiCommunicator;
/// Collectives straight over a duplicate of MPI_COMM_WORLD (src/comm/mpi/mpi_communicator.cpp).
std::unique_ptr<MpiCommunicator> make_naive(const std::string& name);
/// Reduce-scatter and allgather in the node's shared memory around an inter-node allreduce of each
/// rank's slice; where a node cannot share memory, reduce to the node's leader, allreduce among
/// leaders, broadcast (src/comm/mpi/hierarchical_communicator.cpp).
std::unique_ptr<MpiCommunicator> make_hierarchical(const std::string& name);
/// Reduce-scatter in the node, allreduce of each slice across nodes, allgather in the node: through
/// the node's shared memory as hierarchical, or by message passing where a node cannot share it
/// (src/comm/mpi/two_dimensional_communicator.cpp).
std::unique_ptr<MpiCommunicator> make_two_dimensional(const std::string& name);
#else
using HostCommunicator = Communicator;
/// The whole job is this one process (src/comm/single_communicator.cpp).
std::unique_ptr<Communicator> make_single(const std::string& name);
#endif
/// A host communicator: the named algorithm over host memory.
using HostMaker = std::unique_ptr<HostCommunicator> (*)(const std::string& name);

#if DPL_WITH_MPI
/// Wraps the communicator create_communicator hands out so that the collective watchdog sees each
/// of its calls (src/comm/mpi/watched_communicator.cpp).
std::unique_ptr<Communicator> make_watched(std::unique_ptr<Communicator> inner);
#endif

/// Wraps a host communicator so that it also accepts CUDA tensors, staged through pinned host
/// memory (src/comm/staging_communicator.cpp).
std::unique_ptr<Communicator> make_staging(std::unique_ptr<Communicator> inner);

#if DPL_WITH_NCCL
/// A device communicator: takes the host communicator `host` (for host buffers, and for device
/// buffers where NCCL cannot run) and its MPI groups (for its own MPI steps), and runs its
/// algorithm on GPU buffers with NCCL inside nodes and pipelined staged (or CUDA-aware) MPI
/// across them. Creating one communicates nothing.
using DeviceMaker = std::unique_ptr<Communicator> (*)(std::unique_ptr<Communicator> host, const MpiGroups& groups);
/// One ncclAllReduce over all ranks (src/comm/nccl/pure_nccl_communicator.cpp).
std::unique_ptr<Communicator> make_pure_nccl(std::unique_ptr<Communicator> host, const MpiGroups& groups);
/// pure_nccl, refusing a job over several nodes (src/comm/nccl/pure_nccl_communicator.cpp).
std::unique_ptr<Communicator> make_single_node(std::unique_ptr<Communicator> host, const MpiGroups& groups);
/// ncclReduce in the node, MPI across nodes, ncclBroadcast in the node
/// (src/comm/nccl/hierarchical_communicator.cpp).
std::unique_ptr<Communicator> make_nccl_hierarchical(std::unique_ptr<Communicator> host, const MpiGroups& groups);
/// ncclReduceScatter in the node, MPI of each slice across nodes, ncclAllGather in the node
/// (src/comm/nccl/two_dimensional_communicator.cpp).
std::unique_ptr<Communicator> make_nccl_two_dimensional(std::unique_ptr<Communicator> host,
                                                        const MpiGroups& groups);
/// MPI over all ranks on the whole buffer, staged or CUDA-aware (src/comm/nccl/flat_communicator.cpp).
std::unique_ptr<Communicator> make_nccl_flat(std::unique_ptr<Communicator> host, const MpiGroups& groups);
#endif

}  // namespace dpl::comm::detail
