// Every host collective of every MPI communicator, on every reducible dtype, on sizes that are
// trivial (1), odd (17) and large enough to leave MPI's eager protocol (1000003), plus the
// chunked paths that carry more than MPI's int count per call.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi/test_hooks.hpp"
#include "dist_test_util.hpp"
#include "dpl/comm.hpp"

namespace dpl::test {
namespace {

// A value that differs between ranks and along the buffer and stays a small integer, so that sums
// over ranks are exact in float32 too and every dtype can be compared exactly.
std::int64_t value(int rank, std::int64_t i) { return (i * 7 + rank * 13) % 1001 - 300 + rank; }

template <typename T>
void fill_values(Tensor& t, int rank, std::int64_t first = 0) {
  T* p = t.data<T>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(value(rank, first + i));
}

std::int64_t sum_over_ranks(int size, std::int64_t i) {
  std::int64_t s = 0;
  for (int r = 0; r < size; ++r) s += value(r, i);
  return s;
}

// Counts the elements where got differs from want(i) and remembers the first, so a failure on a
// million elements reports one line, not a million.
template <typename T, typename F>
void expect_all(const Tensor& got, F want, const std::string& what) {
  const T* p = got.data<T>();
  std::int64_t wrong = 0;
  std::int64_t first = -1;
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    if (p[i] != static_cast<T>(want(i))) {
      if (first < 0) first = i;
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << got.numel() << " elements wrong; first at " << first
                      << ": got " << (first >= 0 ? +p[first] : T{}) << ", want "
                      << (first >= 0 ? static_cast<T>(want(first)) : T{});
}

struct Case {
  std::string comm;
  DType dtype;
  std::int64_t n;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.comm + "_" + dtype_name(info.param.dtype) + "_" + std::to_string(info.param.n);
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (const char* comm : {"naive", "hierarchical"})
    for (DType t : {kFloat32, kInt32, kInt64})
      for (std::int64_t n : {1, 17, 1000003}) out.push_back({comm, t, n});
  return out;
}

// Runs body<T>() for the case's dtype.
template <template <typename> class Body>
void dispatch(DType t) {
  switch (t) {
    case DType::kFloat32: Body<float>{}(); break;
    case DType::kInt32: Body<std::int32_t>{}(); break;
    case DType::kInt64: Body<std::int64_t>{}(); break;
    default: FAIL() << "unexpected dtype " << t;
  }
}

class Collectives : public ::testing::TestWithParam<Case> {};

// The parameter of the running test, for the dtype-generic bodies below (set by the TEST_P).
const Case* g_case = nullptr;

template <typename T>
struct AllreduceSum {
  void operator()() {
    auto& comm = communicator(g_case->comm);
    Tensor buf = Tensor::empty({g_case->n}, g_case->dtype);
    fill_values<T>(buf, comm.rank());
    comm.allreduce(buf, comm::ReduceOp::kSum);
    expect_all<T>(buf, [&](std::int64_t i) { return sum_over_ranks(comm.size(), i); }, "allreduce sum");
  }
};

template <typename T>
struct AllreduceMean {
  void operator()() {
    auto& comm = communicator(g_case->comm);
    Tensor buf = Tensor::empty({g_case->n}, g_case->dtype);
    fill_values<T>(buf, comm.rank());
    if (g_case->dtype != kFloat32) {
      EXPECT_THROW(comm.allreduce(buf, comm::ReduceOp::kMean), Error);
      return;
    }
    comm.allreduce(buf, comm::ReduceOp::kMean);
    const float size = static_cast<float>(comm.size());
    expect_all<T>(buf, [&](std::int64_t i) { return static_cast<float>(sum_over_ranks(comm.size(), i)) / size; },
                  "allreduce mean");
  }
};

template <typename T>
struct BroadcastFromLast {
  void operator()() {
    auto& comm = communicator(g_case->comm);
    const int root = comm.size() - 1;  // non-zero whenever there is more than one rank
    Tensor buf = Tensor::empty({g_case->n}, g_case->dtype);
    fill_values<T>(buf, comm.rank());
    comm.broadcast(buf, root);
    expect_all<T>(buf, [&](std::int64_t i) { return value(root, i); }, "broadcast");
  }
};

template <typename T>
struct Allgather {
  void operator()() {
    auto& comm = communicator(g_case->comm);
    const std::int64_t n = g_case->n;
    Tensor send = Tensor::empty({n}, g_case->dtype);
    fill_values<T>(send, comm.rank());
    Tensor recv = Tensor::full({comm.size(), n}, -1, g_case->dtype);
    comm.allgather(send, recv);
    expect_all<T>(recv, [&](std::int64_t j) { return value(static_cast<int>(j / n), j % n); }, "allgather");

    // In place: this rank's block of recv is the send buffer.
    Tensor recv2 = Tensor::full({comm.size() * n}, -1, g_case->dtype);
    Tensor mine = recv2.view_range(comm.rank() * n, {n});
    fill_values<T>(mine, comm.rank());
    comm.allgather(mine, recv2);
    expect_all<T>(recv2, [&](std::int64_t j) { return value(static_cast<int>(j / n), j % n); }, "allgather in place");
  }
};

template <typename T>
struct ReduceScatter {
  void operator()() {
    auto& comm = communicator(g_case->comm);
    const std::int64_t n = g_case->n;
    Tensor send = Tensor::empty({comm.size() * n}, g_case->dtype);
    fill_values<T>(send, comm.rank());
    Tensor recv = Tensor::full({n}, -1, g_case->dtype);
    comm.reduce_scatter(send, recv, comm::ReduceOp::kSum);
    const std::int64_t first = comm.rank() * n;
    expect_all<T>(recv, [&](std::int64_t i) { return sum_over_ranks(comm.size(), first + i); }, "reduce_scatter sum");
    if (g_case->dtype == kFloat32) {
      comm.reduce_scatter(send, recv, comm::ReduceOp::kMean);
      const float size = static_cast<float>(comm.size());
      expect_all<T>(
          recv, [&](std::int64_t i) { return static_cast<float>(sum_over_ranks(comm.size(), first + i)) / size; },
          "reduce_scatter mean");
    } else {
      EXPECT_THROW(comm.reduce_scatter(send, recv, comm::ReduceOp::kMean), Error);
    }
  }
};

template <typename T>
struct SendRecvRing {
  void operator()() {
    auto& comm = communicator(g_case->comm);
    if (comm.size() < 2) GTEST_SKIP() << "needs two ranks";
    const int next = (comm.rank() + 1) % comm.size();
    const int prev = (comm.rank() + comm.size() - 1) % comm.size();
    Tensor out = Tensor::empty({g_case->n}, g_case->dtype);
    fill_values<T>(out, comm.rank());
    Tensor in = Tensor::full({g_case->n}, -1, g_case->dtype);
    // Even ranks send first, odd ranks receive first: blocking sends of large messages in a ring
    // would otherwise all wait for a receiver.
    if (comm.rank() % 2 == 0) {
      comm.send(out, next, 7);
      comm.recv(in, prev, 7);
    } else {
      comm.recv(in, prev, 7);
      comm.send(out, next, 7);
    }
    expect_all<T>(in, [&](std::int64_t i) { return value(prev, i); }, "send/recv ring");
  }
};

#define DPL_DIST_COLLECTIVE_TEST(Name)   \
  TEST_P(Collectives, Name) {            \
    g_case = &GetParam();                \
    dispatch<Name>(GetParam().dtype);    \
  }

DPL_DIST_COLLECTIVE_TEST(AllreduceSum)
DPL_DIST_COLLECTIVE_TEST(AllreduceMean)
DPL_DIST_COLLECTIVE_TEST(BroadcastFromLast)
DPL_DIST_COLLECTIVE_TEST(Allgather)
DPL_DIST_COLLECTIVE_TEST(ReduceScatter)
DPL_DIST_COLLECTIVE_TEST(SendRecvRing)

INSTANTIATE_TEST_SUITE_P(Dist, Collectives, ::testing::ValuesIn(all_cases()), case_name);

TEST(CollectivesMisc, Barrier) {
  for (const char* name : {"naive", "hierarchical"}) {
    auto& comm = communicator(name);
    // A barrier is correct when no rank leaves before the last one arrives: the last rank sleeps
    // before entering, and every rank must then see at least that much time pass.
    comm.barrier();  // aligns the start
    const auto start = std::chrono::steady_clock::now();
    if (comm.rank() == comm.size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    comm.barrier();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Leaves margin for the first barrier's ranks leaving at slightly different times.
    EXPECT_GE(waited, 0.15) << name;
  }
}

TEST(CollectivesMisc, EmptyBuffersAreNoOps) {
  for (const char* name : {"naive", "hierarchical"}) {
    auto& comm = communicator(name);
    Tensor empty = Tensor::empty({0}, kFloat32);
    Tensor recv = Tensor::empty({0}, kFloat32);
    EXPECT_NO_THROW(comm.allreduce(empty, comm::ReduceOp::kMean));
    EXPECT_NO_THROW(comm.broadcast(empty, 0));
    EXPECT_NO_THROW(comm.allgather(empty, recv));
    EXPECT_NO_THROW(comm.reduce_scatter(empty, recv));
  }
}

TEST(CollectivesMisc, SixteenBitTypesMoveButDoNotReduce) {
  auto& comm = communicator("naive");
  Tensor buf = Tensor::empty({5}, kBFloat16);
  EXPECT_NO_THROW(comm.broadcast(buf, 0));
  Tensor gathered = Tensor::empty({comm.size() * 5}, kFloat16);
  EXPECT_NO_THROW(comm.allgather(Tensor::empty({5}, kFloat16), gathered));
  EXPECT_THROW(comm.allreduce(buf), Error);
}

// Lowers MPI's per-call element limit for one test, so the paths that split a buffer over several
// MPI calls run on small buffers; restores it even when a check fails.
class ChunkLimit {
 public:
  explicit ChunkLimit(std::int64_t n) { comm::test_hooks::set_max_count(n); }
  ~ChunkLimit() { comm::test_hooks::set_max_count(0); }
};

TEST(CollectivesMisc, ChunkedAboveTheCountLimit) {
  const ChunkLimit limit(1000);
  const std::int64_t n = 2503;  // two full chunks and a partial one
  for (const char* name : {"naive", "hierarchical"}) {
    auto& comm = communicator(name);
    const std::string tag = name;

    Tensor a = Tensor::empty({n}, kInt64);
    fill_values<std::int64_t>(a, comm.rank());
    comm.allreduce(a);
    expect_all<std::int64_t>(a, [&](std::int64_t i) { return sum_over_ranks(comm.size(), i); }, tag + " allreduce");

    Tensor f = Tensor::empty({n}, kFloat32);
    fill_values<float>(f, comm.rank());
    comm.allreduce(f, comm::ReduceOp::kMean);
    expect_all<float>(
        f, [&](std::int64_t i) { return static_cast<float>(sum_over_ranks(comm.size(), i)) / comm.size(); },
        tag + " allreduce mean");

    Tensor b = Tensor::empty({n}, kInt32);
    fill_values<std::int32_t>(b, comm.rank());
    comm.broadcast(b, comm.size() - 1);
    expect_all<std::int32_t>(b, [&](std::int64_t i) { return value(comm.size() - 1, i); }, tag + " broadcast");

    Tensor s = Tensor::empty({n}, kInt64);
    fill_values<std::int64_t>(s, comm.rank());
    Tensor g = Tensor::empty({comm.size() * n}, kInt64);
    comm.allgather(s, g);
    expect_all<std::int64_t>(g, [&](std::int64_t j) { return value(static_cast<int>(j / n), j % n); },
                             tag + " allgather");

    Tensor rs_send = Tensor::empty({comm.size() * n}, kInt64);
    fill_values<std::int64_t>(rs_send, comm.rank());
    Tensor rs_recv = Tensor::empty({n}, kInt64);
    comm.reduce_scatter(rs_send, rs_recv);
    expect_all<std::int64_t>(
        rs_recv, [&](std::int64_t i) { return sum_over_ranks(comm.size(), comm.rank() * n + i); },
        tag + " reduce_scatter");

    if (comm.size() >= 2) {
      Tensor out = Tensor::empty({n}, kFloat32);
      fill_values<float>(out, comm.rank());
      Tensor in = Tensor::empty({n}, kFloat32);
      const int next = (comm.rank() + 1) % comm.size();
      const int prev = (comm.rank() + comm.size() - 1) % comm.size();
      if (comm.rank() % 2 == 0) {
        comm.send(out, next, 3);
        comm.recv(in, prev, 3);
      } else {
        comm.recv(in, prev, 3);
        comm.send(out, next, 3);
      }
      expect_all<float>(in, [&](std::int64_t i) { return value(prev, i); }, tag + " send/recv");
    }
  }
}

}  // namespace
}  // namespace dpl::test
