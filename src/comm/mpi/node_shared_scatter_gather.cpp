// The reduce-scatter and the allgather of hierarchical and two_dimensional through the node's
// shared window (node_shared_allreduce.hpp), the two halves of ZeRO's sharded step. Each costs about
// half the node's passes of the allreduce, where MPI's reduce-scatter over the job was measured
// slower than the whole allreduce through the window (docs/performance.md, "Sharded optimizer state
// on the CPU"). See docs/communicators.md ("Reduce-scatter and allgather on host memory").
//
// The blocks map onto nodes regularly (scatters()): with L ranks per node and N nodes, block
// k * L + i belongs to intra_rank i of node k. Inside a node, intra_rank i needs every rank's
// blocks i, L + i, ..., (N - 1) * L + i: the node's sums of those N blocks are what it carries
// across nodes, where the ranks of intra_rank i reduce-scatter them among themselves.

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/checks.hpp"
#include "comm/mpi/mpi_runtime.hpp"
#include "comm/mpi/node_shared_allreduce.hpp"
#include "comm/mpi/node_shared_sums.hpp"

namespace dpl::comm::detail {

namespace {

constexpr std::int64_t kLineBytes = 64;

// Elements of each block that one round moves, when each rank's chunk of the window holds
// `slots` of them: whole cache lines where they fit, so that the slots of one rank never share a
// line with the next rank's (tests shrink the chunk below a line per slot; then any count).
std::int64_t column_elements(std::int64_t chunk_bytes, std::int64_t esize, std::int64_t slots) {
  const std::int64_t c = chunk_bytes / esize / slots;
  const std::int64_t line = kLineBytes / esize;
  return c >= line ? c / line * line : c;
}

}  // namespace

void NodeSharedAllreduce::reduce_scatter(const void* send, void* recv, std::int64_t m, DType dtype, bool mean) {
  if (m == 0) return;
  const std::int64_t esize = static_cast<std::int64_t>(dtype_size(dtype));
  const int L = local_size_, N = inter_size_, me = local_rank_;
  const char* const in = static_cast<const char*>(send);
  // One node: this rank's sum is its block of the result and goes straight into recv.
  if (N > 1) node_blocks_.resize(static_cast<std::size_t>(N * m * esize));
  char* const sums = N == 1 ? static_cast<char*>(recv) : node_blocks_.data();
  // Each rank hands every other rank of its node that rank's N blocks: N * (L - 1) slots.
  const std::int64_t c = column_elements(chunk_bytes_, esize, static_cast<std::int64_t>(N) * (L - 1));
  // Where rank r put the column meant for rank q, block of node k (it keeps no slot for itself).
  auto slot = [&](int r, int q, int k) {
    return inputs_[static_cast<std::size_t>(r)] + ((q < r ? q : q - 1) * N + k) * c * esize;
  };
  auto block = [&](int k, int q) { return (static_cast<std::int64_t>(k) * L + q) * m; };
  std::vector<const char*> sources(static_cast<std::size_t>(L));
  // The stores the allreduce last chose for this node; this measures nothing of its own.
  const bool streaming = streaming_stores();

  for (std::int64_t off = 0; off < m; off += c) {
    const std::size_t bytes = static_cast<std::size_t>(std::min(c, m - off) * esize);
    for (int q = 0; q < L; ++q) {
      if (q == me) continue;
      for (int k = 0; k < N; ++k) store_copy(slot(me, q, k), in + (block(k, q) + off) * esize, bytes, streaming);
    }
    fence_streaming_stores(streaming);
    node_barrier();
    // This rank's own contribution is read from its own buffer; the others' from the window, in
    // intra_rank order, as the allreduce adds them.
    for (int k = 0; k < N; ++k) {
      for (int r = 0; r < L; ++r)
        sources[static_cast<std::size_t>(r)] = r == me ? in + (block(k, me) + off) * esize : slot(r, me, k);
      add_sources(dtype, sums + (k * m + off) * esize, sources.data(), L, static_cast<std::int64_t>(bytes) / esize,
                  false);
    }
    // Nobody writes its slots again until every rank has read them.
    node_barrier();
  }

  if (N > 1) {
    const MPI_Datatype type = mpi_datatype(dtype);
    if (m <= max_count()) {
      DPL_MPI_CHECK(MPI_Reduce_scatter_block(sums, recv, static_cast<int>(m), type, MPI_SUM, inter_),
                    what_call("reduce_scatter", comm_name_) + ": MPI_Reduce_scatter_block");
    } else {
      // Beyond MPI's count: each node's block reduced to its rank, in chunks (in place on the root).
      int node = 0;
      MPI_Comm_rank(inter_, &node);
      for (int k = 0; k < N; ++k)
        for_each_chunk(m, [&](std::int64_t off, int count) {
          char* p = sums + (k * m + off) * esize;
          DPL_MPI_CHECK(MPI_Reduce(k == node ? MPI_IN_PLACE : p, k == node ? p : nullptr, count, type, MPI_SUM, k,
                                   inter_),
                        what_call("reduce_scatter", comm_name_) + ": MPI_Reduce");
        });
      std::memcpy(recv, sums + node * m * esize, static_cast<std::size_t>(m * esize));
    }
  }
  if (mean) divide(static_cast<char*>(recv), m, job_size_);
}

void NodeSharedAllreduce::allgather(const void* send, void* recv, std::int64_t m, DType dtype, bool in_place) {
  if (m == 0) return;
  const std::int64_t esize = static_cast<std::int64_t>(dtype_size(dtype));
  const int L = local_size_, N = inter_size_, me = local_rank_;
  char* const out = static_cast<char*>(recv);
  auto block = [&](int k, int q) { return out + (static_cast<std::int64_t>(k) * L + q) * m * esize; };
  const std::size_t block_bytes = static_cast<std::size_t>(m * esize);

  // First this rank's blocks of every node into their places in recv: across nodes among the
  // ranks of this intra_rank, then (several nodes) from the gathered blocks into recv.
  if (N == 1) {
    if (!in_place) std::memcpy(block(0, me), send, block_bytes);
  } else {
    node_blocks_.resize(static_cast<std::size_t>(N) * block_bytes);
    const MPI_Datatype type = mpi_datatype(dtype);
    if (m <= max_count()) {
      DPL_MPI_CHECK(MPI_Allgather(send, static_cast<int>(m), type, node_blocks_.data(), static_cast<int>(m), type,
                                  inter_),
                    what_call("allgather", comm_name_) + ": MPI_Allgather");
    } else {
      int node = 0;
      MPI_Comm_rank(inter_, &node);
      std::memcpy(node_blocks_.data() + node * block_bytes, send, block_bytes);
      for (int k = 0; k < N; ++k)
        for_each_chunk(m, [&](std::int64_t off, int count) {
          DPL_MPI_CHECK(MPI_Bcast(node_blocks_.data() + (k * m + off) * esize, count, type, k, inter_),
                        what_call("allgather", comm_name_) + ": MPI_Bcast");
        });
    }
    for (int k = 0; k < N; ++k) std::memcpy(block(k, me), node_blocks_.data() + k * block_bytes, block_bytes);
  }

  // Then through the window: each rank's N blocks column by column, every rank copying out the
  // others'.
  const std::int64_t c = column_elements(chunk_bytes_, esize, N);
  const bool streaming = streaming_stores();
  for (std::int64_t off = 0; off < m; off += c) {
    const std::size_t bytes = static_cast<std::size_t>(std::min(c, m - off) * esize);
    char* const mine = inputs_[static_cast<std::size_t>(me)];
    for (int k = 0; k < N; ++k) store_copy(mine + k * c * esize, block(k, me) + off * esize, bytes, streaming);
    fence_streaming_stores(streaming);
    node_barrier();
    for (int q = 0; q < L; ++q) {
      if (q == me) continue;
      const char* theirs = inputs_[static_cast<std::size_t>(q)];
      for (int k = 0; k < N; ++k) std::memcpy(block(k, q) + off * esize, theirs + k * c * esize, bytes);
    }
    node_barrier();
  }
}

}  // namespace dpl::comm::detail
