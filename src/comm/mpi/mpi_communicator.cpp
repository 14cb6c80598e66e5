#include "comm/mpi/mpi_communicator.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "comm/checks.hpp"
#include "comm/environment.hpp"
#include "comm/factories.hpp"
#include "dpl/core/threads.hpp"

namespace dpl::comm::detail {

namespace {

char* bytes(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

std::string mpi_what(const std::string& comm_name, const char* collective, const char* call) {
  return what_call(collective, comm_name) + ": " + call;
}

}  // namespace

MpiCommunicator::MpiCommunicator(std::string name) : name_(std::move(name)) {
  ensure_mpi();
  build_topology();
  tag_ub_ = tag_upper_bound();
}

void MpiCommunicator::build_topology() {
  int world_size = 0;
  DPL_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size), "create_communicator: MPI_Comm_size");
  // The variable is checked before the first collective call, so a bad value fails the same way
  // on every rank and leaves no rank inside a split.
  const std::vector<int> virtual_nodes = virtual_node_sizes(world_size);

  MPI_Comm c = MPI_COMM_NULL;
  DPL_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c), "create_communicator: MPI_Comm_dup");
  world_ = CommHandle(c);
  // Communicators split from world_ inherit this, so every failure in our calls becomes a
  // dpl::Error instead of MPI's default of killing the job without our message.
  DPL_MPI_CHECK(MPI_Comm_set_errhandler(world(), MPI_ERRORS_RETURN), "create_communicator: MPI_Comm_set_errhandler");

  int rank = 0;
  MPI_Comm_rank(world(), &rank);

  DPL_MPI_CHECK(MPI_Comm_split_type(world(), MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &c),
                "create_communicator: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  CommHandle host(c);
  int host_size = 1;
  int host_rank = 0;
  MPI_Comm_size(host.get(), &host_size);
  MPI_Comm_rank(host.get(), &host_rank);

  if (!virtual_nodes.empty()) {
    DPL_MPI_CHECK(MPI_Comm_split(world(), node_of(rank, virtual_nodes), rank, &c),
                  "create_communicator: MPI_Comm_split");
    intra_ = CommHandle(c);
  } else {
    intra_ = std::move(host);
  }
  int intra_rank = 0;
  int intra_size = 1;
  MPI_Comm_rank(intra(), &intra_rank);
  MPI_Comm_size(intra(), &intra_size);

  // Nodes are ordered by their leader's (intra_rank 0) world rank; keying every inter group by
  // the leader keeps the node order the same in all of them even when hardware nodes interleave
  // world ranks.
  int leader = rank;
  DPL_MPI_CHECK(MPI_Bcast(&leader, 1, MPI_INT, 0, intra()), "create_communicator: MPI_Bcast");
  DPL_MPI_CHECK(MPI_Comm_split(world(), intra_rank, leader, &c), "create_communicator: MPI_Comm_split");
  inter_ = CommHandle(c);
  int node = 0;
  MPI_Comm_rank(inter(), &node);  // among the leaders this is the node index
  DPL_MPI_CHECK(MPI_Bcast(&node, 1, MPI_INT, 0, intra()), "create_communicator: MPI_Bcast");
  // Every rank learns every node's size (hardware nodes may differ too), so that a communicator
  // that needs equal nodes refuses on every rank alike, before its first collective.
  const int mine[2] = {node, intra_size};
  std::vector<int> all(2 * static_cast<std::size_t>(world_size));
  DPL_MPI_CHECK(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, world()), "create_communicator: MPI_Allgather");
  int nodes = 0;
  for (int r = 0; r < world_size; ++r) nodes = std::max(nodes, all[2 * static_cast<std::size_t>(r)] + 1);
  std::vector<int> node_sizes(static_cast<std::size_t>(nodes), 0);
  for (int r = 0; r < world_size; ++r)
    node_sizes[static_cast<std::size_t>(all[2 * static_cast<std::size_t>(r)])] = all[2 * static_cast<std::size_t>(r) + 1];

  topology_ = Topology{rank, world_size, intra_rank, intra_size, node, nodes, host_rank, host_size, std::move(node_sizes)};
  apply_thread_rule(host_size);
}

void MpiCommunicator::apply_thread_rule(int processes_on_host) {
  // Threads are shared among the processes of the physical host, whatever the virtual nodes.
  const ThreadSetup setup = configure_threads_once(processes_on_host);
  if (!setup.first) return;  // every rank made its first communicator in the same call
  int mine = setup.oversubscribed ? 1 : 0;
  int count = 0;
  DPL_MPI_CHECK(MPI_Allreduce(&mine, &count, 1, MPI_INT, MPI_SUM, world()), "create_communicator: MPI_Allreduce");
  if (count > 0 && topology_.rank == 0) {
    const std::string line = binding_warning(count, topology_.size, affinity_cpus(), num_threads()) + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
  }
}

// --- building blocks -----------------------------------------------------------------------------

void MpiCommunicator::allreduce_sum(MPI_Comm comm, void* data, std::int64_t n, DType dtype, const char* what) const {
  const MPI_Datatype type = mpi_datatype(dtype);
  const std::size_t esize = dtype_size(dtype);
  for_each_chunk(n, [&](std::int64_t off, int count) {
    DPL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + off * esize, count, type, MPI_SUM, comm),
                  mpi_what(name_, what, "MPI_Allreduce"));
  });
}

void MpiCommunicator::reduce_sum_to_root(MPI_Comm comm, void* data, std::int64_t n, DType dtype, int root,
                                         bool is_root, const char* what) const {
  const MPI_Datatype type = mpi_datatype(dtype);
  const std::size_t esize = dtype_size(dtype);
  for_each_chunk(n, [&](std::int64_t off, int count) {
    char* p = static_cast<char*>(data) + off * esize;
    // The root reduces in place; the others only contribute (their recvbuf is not read).
    DPL_MPI_CHECK(MPI_Reduce(is_root ? MPI_IN_PLACE : p, is_root ? p : nullptr, count, type, MPI_SUM, root, comm),
                  mpi_what(name_, what, "MPI_Reduce"));
  });
}

void MpiCommunicator::bcast(MPI_Comm comm, void* data, std::int64_t n, DType dtype, int root,
                            const char* what) const {
  const MPI_Datatype type = mpi_datatype(dtype);
  const std::size_t esize = dtype_size(dtype);
  for_each_chunk(n, [&](std::int64_t off, int count) {
    DPL_MPI_CHECK(MPI_Bcast(static_cast<char*>(data) + off * esize, count, type, root, comm),
                  mpi_what(name_, what, "MPI_Bcast"));
  });
}

// --- collectives ---------------------------------------------------------------------------------

void MpiCommunicator::allreduce(Tensor& buf, ReduceOp op) {
  check_host_buffer("allreduce", name_, buf, "buf", Use::kReduce);
  check_op("allreduce", name_, buf, op);
  last_phases_.clear();
  allreduce_sum(world(), buf.raw_data(), buf.numel(), buf.dtype(), "allreduce");
  if (op == ReduceOp::kMean) divide_in_place(buf, size());
}

void MpiCommunicator::broadcast(Tensor& buf, int root) {
  check_host_buffer("broadcast", name_, buf, "buf", Use::kMove);
  check_root("broadcast", name_, root, size());
  bcast(world(), buf.raw_data(), buf.numel(), buf.dtype(), root, "broadcast");
}

void MpiCommunicator::allgather(const Tensor& send, Tensor& recv) {
  const bool in_place = check_allgather(name_, send, recv, rank(), size());
  const std::int64_t n = send.numel();
  if (n == 0) return;
  const MPI_Datatype type = mpi_datatype(send.dtype());
  if (n <= max_count()) {
    DPL_MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : send.raw_data(), static_cast<int>(n), type,
                                recv.raw_data(), static_cast<int>(n), type, world()),
                  mpi_what(name_, "allgather", "MPI_Allgather"));
    return;
  }
  // A block too large for one call: each rank in turn broadcasts its block, in chunks. Slower than
  // a ring but only reached beyond 2^31 elements per rank, where bandwidth, not latency, rules.
  if (!in_place) std::memcpy(bytes(recv) + static_cast<std::size_t>(rank()) * send.nbytes(), send.raw_data(), send.nbytes());
  for (int r = 0; r < size(); ++r)
    bcast(world(), bytes(recv) + static_cast<std::size_t>(r) * send.nbytes(), n, send.dtype(), r, "allgather");
}

void MpiCommunicator::reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op) {
  check_reduce_scatter(name_, send, recv, size());
  check_op("reduce_scatter", name_, send, op);
  const std::int64_t m = recv.numel();
  if (m == 0) return;
  const MPI_Datatype type = mpi_datatype(send.dtype());
  if (m <= max_count()) {
    DPL_MPI_CHECK(MPI_Reduce_scatter_block(send.raw_data(), recv.raw_data(), static_cast<int>(m), type, MPI_SUM,
                                           world()),
                  mpi_what(name_, "reduce_scatter", "MPI_Reduce_scatter_block"));
  } else {
    // Beyond MPI's count: reduce each rank's block to it, in chunks. The staging copy lets the
    // root reduce in place without touching send.
    const std::size_t block = recv.nbytes();
    std::memcpy(recv.raw_data(), bytes(send) + static_cast<std::size_t>(rank()) * block, block);
    for (int r = 0; r < size(); ++r) {
      void* data = r == rank() ? recv.raw_data() : static_cast<void*>(bytes(send) + static_cast<std::size_t>(r) * block);
      reduce_sum_to_root(world(), data, m, send.dtype(), r, r == rank(), "reduce_scatter");
    }
  }
  if (op == ReduceOp::kMean) divide_in_place(recv, size());
}

void MpiCommunicator::barrier() { DPL_MPI_CHECK(MPI_Barrier(world()), mpi_what(name_, "barrier", "MPI_Barrier")); }

void MpiCommunicator::send(const Tensor& buf, int dest, int tag) {
  check_host_buffer("send", name_, buf, "buf", Use::kMove);
  check_peer("send", name_, dest, rank(), size(), tag, tag_ub_);
  const MPI_Datatype type = mpi_datatype(buf.dtype());
  const std::size_t esize = dtype_size(buf.dtype());
  for_each_chunk(buf.numel(), [&](std::int64_t off, int count) {
    DPL_MPI_CHECK(MPI_Send(bytes(buf) + off * esize, count, type, dest, tag, world()),
                  mpi_what(name_, "send", "MPI_Send"));
  });
}

void MpiCommunicator::recv(Tensor& buf, int source, int tag) {
  check_host_buffer("recv", name_, buf, "buf", Use::kMove);
  check_peer("recv", name_, source, rank(), size(), tag, tag_ub_);
  const MPI_Datatype type = mpi_datatype(buf.dtype());
  const std::size_t esize = dtype_size(buf.dtype());
  for_each_chunk(buf.numel(), [&](std::int64_t off, int count) {
    MPI_Status status;
    const int rc = MPI_Recv(bytes(buf) + off * esize, count, type, source, tag, world(), &status);
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    DPL_CHECK(cls != MPI_ERR_TRUNCATE, what_call("recv", name_), ": rank ", source, " sent more than the ",
              buf.numel(), " elements of ", buf.dtype(), " this buffer holds (tag ", tag, ")");
    DPL_MPI_CHECK(rc, mpi_what(name_, "recv", "MPI_Recv"));
    int got = 0;
    MPI_Get_count(&status, type, &got);
    DPL_CHECK(got == count, what_call("recv", name_), ": expected ", buf.numel(), " elements of ", buf.dtype(),
              " from rank ", source, " (tag ", tag, "), received ", off + got);
  });
}

std::unique_ptr<MpiCommunicator> make_naive(const std::string& name) { return std::make_unique<MpiCommunicator>(name); }

}  // namespace dpl::comm::detail
