// The host allreduce, reduce-scatter and allgather of hierarchical and two_dimensional (the node's
// shared window, and the message-passing paths kept where it cannot serve) against results every
// rank can predict, on every node layout this job allows: one node, every even split, uneven nodes.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/environment.hpp"
#include "comm/mpi/test_hooks.hpp"
#include "dist_test_util.hpp"
#include "dpl/comm.hpp"

namespace dpl::test {
namespace {

// DPL_RANKS_PER_NODE values to try on a job of `size` ranks: unset (this run's own layout, or
// one machine), every node size that divides the job, and uneven lists from 3 ranks on.
std::vector<std::string> layouts(int size) {
  std::vector<std::string> out = {""};
  for (int k = 1; k <= size; ++k)
    if (size % k == 0) out.push_back(std::to_string(k));
  if (size >= 3) {
    out.push_back(comm::detail::node_sizes_text({size - 1, 1}));
    out.push_back(comm::detail::node_sizes_text({1, size - 1}));
  }
  if (size >= 4) out.push_back(comm::detail::node_sizes_text({1, size - 3, 2}));
  if (size >= 5) out.push_back(comm::detail::node_sizes_text({size - 2, 2}));
  return out;
}

bool uneven(const std::string& layout) { return layout.find(',') != std::string::npos; }

// Small integers: their float32 sums over a few ranks are exact, so every algorithm must give the
// very same bits whatever order it adds in.
std::int64_t small_value(int rank, std::int64_t i) { return (i * 7 + rank * 13) % 41 - 20; }

// Values near the int32 limits: their sums wrap, which every communicator must do alike.
std::int32_t wrapping_value(int rank, std::int64_t i) {
  return static_cast<std::int32_t>(2147483000 - ((i * 31 + rank * 977) % 2000));
}

template <typename T>
Tensor filled(std::int64_t n, DType dtype, int rank, T (*value)(int, std::int64_t)) {
  Tensor t = Tensor::empty({n}, dtype);
  T* p = t.data<T>();
  for (std::int64_t i = 0; i < n; ++i) p[i] = value(rank, i);
  return t;
}

float small_float(int rank, std::int64_t i) { return static_cast<float>(small_value(rank, i)); }
std::int64_t small_int64(int rank, std::int64_t i) { return small_value(rank, i) * 1000003; }

// Counts the elements of got that differ from want(i); reports the first.
template <typename T, typename Want>
void expect_elements(const Tensor& got, Want want, const std::string& what) {
  const T* p = got.data<T>();
  std::int64_t wrong = 0, first = -1;
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    if (p[i] != want(i)) {
      if (first < 0) first = i;
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << got.numel() << " wrong, first at " << first;
}

// Every dtype, sum and mean, on one size, against the exact answer (floats, int64) and against
// naive (int32 wrapping, and floats of any value to rounding).
void check_size(comm::Communicator& comm, std::int64_t n, const std::string& where) {
  auto& naive = communicator("naive");
  const int rank = comm.rank();
  const int size = comm.size();
  const std::string what = where + " n=" + std::to_string(n);
  auto sum_of = [&](std::int64_t i) {
    std::int64_t s = 0;
    for (int r = 0; r < size; ++r) s += small_value(r, i);
    return s;
  };

  Tensor f = filled<float>(n, kFloat32, rank, &small_float);
  comm.allreduce(f);
  expect_elements<float>(f, [&](std::int64_t i) { return static_cast<float>(sum_of(i)); }, what + " float32 sum");

  Tensor m = filled<float>(n, kFloat32, rank, &small_float);
  comm.allreduce(m, comm::ReduceOp::kMean);
  expect_elements<float>(
      m, [&](std::int64_t i) { return static_cast<float>(sum_of(i)) / static_cast<float>(size); },
      what + " float32 mean");

  Tensor l = filled<std::int64_t>(n, kInt64, rank, &small_int64);
  comm.allreduce(l);
  expect_elements<std::int64_t>(l, [&](std::int64_t i) { return sum_of(i) * 1000003; }, what + " int64 sum");

  Tensor w = filled<std::int32_t>(n, kInt32, rank, &wrapping_value);
  Tensor w_naive = w.clone();
  comm.allreduce(w);
  naive.allreduce(w_naive);
  EXPECT_EQ(w.to_vector<std::int32_t>(), w_naive.to_vector<std::int32_t>()) << what << " int32 wrapping sum";

  // Normal values: the order of additions differs from naive's, so they agree to rounding; every
  // rank must still hold the very same bits.
  Generator gen(1234 + static_cast<std::uint64_t>(rank));
  Tensor g = Tensor::normal({n}, 0.f, 1.f, gen);
  Tensor g_naive = g.clone();
  comm.allreduce(g, comm::ReduceOp::kMean);
  naive.allreduce(g_naive, comm::ReduceOp::kMean);
  const float tol = 8.0f * static_cast<float>(size) * 1.2e-7f * 8.0f;
  const float* a = g.data<float>();
  const float* b = g_naive.data<float>();
  std::int64_t far = 0;
  for (std::int64_t i = 0; i < n; ++i) far += std::abs(a[i] - b[i]) > tol;
  EXPECT_EQ(far, 0) << what << " normal float32 mean against naive";
  EXPECT_TRUE(same_on_every_rank(naive, g)) << what << " normal float32 mean differs between ranks";
}

// The sizes that exercise the edges: nothing, fewer elements than ranks, counts that do not divide
// by the ranks or by a cache line, one chunk and a remainder, several chunks; with the default
// chunk, also a larger buffer. (Small chunks keep the test quick on oversubscribed machines: each
// chunk is a few barriers.)
std::vector<std::int64_t> sizes_for(int ranks, std::int64_t chunk_floats) {
  std::vector<std::int64_t> sizes = {0, 1, ranks - 1, ranks + 1, 17, 16 * ranks + 3, 1000};
  if (chunk_floats > 0) {
    sizes.insert(sizes.end(), {chunk_floats, chunk_floats + 1, 3 * chunk_floats + 5});
  } else {
    sizes.push_back(100003);
  }
  return sizes;
}

// Lowers the chunk size, or turns the window off, for the communicators created while it lives.
class SharedPathSetup {
 public:
  SharedPathSetup(std::int64_t chunk_bytes, bool window,
                  std::optional<WindowStoresSetting> stores = std::nullopt) {
    comm::test_hooks::set_shared_chunk_bytes(chunk_bytes);
    comm::test_hooks::set_shared_window_allowed(window);
    comm::test_hooks::set_shared_window_stores(stores);
  }
  ~SharedPathSetup() {
    comm::test_hooks::set_shared_chunk_bytes(0);
    comm::test_hooks::set_shared_window_allowed(true);
    comm::test_hooks::set_shared_window_stores(std::nullopt);
  }
  SharedPathSetup(const SharedPathSetup&) = delete;
  SharedPathSetup& operator=(const SharedPathSetup&) = delete;
};

// Runs check(comm, where) on hierarchical and two_dimensional created under every layout, with the
// chunk and window given (two_dimensional refuses uneven nodes; topology_test checks how).
template <typename Check>
void for_each_layout(std::int64_t chunk_bytes, bool window, std::optional<WindowStoresSetting> stores, Check check) {
  const int size = communicator("naive").size();
  for (const auto& layout : layouts(size)) {
    std::optional<ScopedEnv> env;  // none: this run's own layout
    if (!layout.empty()) env.emplace("DPL_RANKS_PER_NODE", layout);
    const bool even = layout.empty() ? !uneven_nodes() : !uneven(layout);
    for (const char* name : {"hierarchical", "two_dimensional"}) {
      if (!even && std::string(name) == "two_dimensional") continue;
      std::shared_ptr<comm::Communicator> comm;
      {
        const SharedPathSetup setup(chunk_bytes, window, stores);
        comm = comm::create_communicator(name);
      }
      const std::string where = std::string(name) + " DPL_RANKS_PER_NODE=" + (layout.empty() ? "as launched" : layout) +
                                " chunk=" + std::to_string(chunk_bytes) + (window ? "" : " no window");
      check(*comm, where);
    }
  }
}

void check_layouts(std::int64_t chunk_bytes, bool window,
                   std::optional<WindowStoresSetting> stores = std::nullopt) {
  const int size = communicator("naive").size();
  for_each_layout(chunk_bytes, window, stores, [&](comm::Communicator& comm, const std::string& where) {
    for (const std::int64_t n : sizes_for(size, chunk_bytes / 4)) check_size(comm, n, where);
    ASSERT_EQ(comm.last_phases().size(), 3u) << where;
    EXPECT_EQ(comm.last_phases()[0].name, "intra_reduce") << where;
    EXPECT_EQ(comm.last_phases()[1].name, "inter_allreduce") << where;
  });
}

template <typename T>
T small_as(int rank, std::int64_t i) {
  return static_cast<T>(small_value(rank, i));
}

// allgather of rank r's block small_value(r, i), apart and in place, in `dtype`; T is the host
// type the values are written in (float for the 16-bit types, which are cast to and from it).
template <typename T>
void check_allgather(comm::Communicator& comm, std::int64_t n, DType dtype, const std::string& where) {
  const bool narrow = dtype == kBFloat16 || dtype == kFloat16;
  const int size = comm.size();
  const std::string what = where + " allgather " + dtype_name(dtype);
  Tensor mine = filled<T>(n, narrow ? kFloat32 : dtype, comm.rank(), &small_as<T>);
  if (narrow) mine = mine.to(dtype);
  auto want = [&](std::int64_t i) { return small_as<T>(static_cast<int>(i / n), i % n); };
  Tensor all = Tensor::zeros({size * n}, dtype);
  comm.allgather(mine, all);
  expect_elements<T>(narrow ? all.to(kFloat32) : all, want, what);
  Tensor in_place = Tensor::zeros({size * n}, dtype);
  Tensor own = in_place.narrow(0, comm.rank() * n, n);
  own.copy_(mine);
  comm.allgather(own, in_place);
  expect_elements<T>(narrow ? in_place.to(kFloat32) : in_place, want, what + " in place");
}

// reduce_scatter and allgather on blocks of n elements per rank: every reducible dtype with kSum,
// float32 with kMean, int32 wrapping against naive, the 16-bit types moved by allgather, and
// allgather in place. Blocks of small integers, so every algorithm gives the exact answer.
void check_scatter_gather(comm::Communicator& comm, std::int64_t n, const std::string& where) {
  auto& naive = communicator("naive");
  const int rank = comm.rank();
  const int size = comm.size();
  const std::int64_t first = rank * n;  // this rank's block of the whole buffer
  const std::string what = where + " block=" + std::to_string(n);
  auto sum_of = [&](std::int64_t i) {
    std::int64_t s = 0;
    for (int r = 0; r < size; ++r) s += small_value(r, i);
    return s;
  };

  Tensor f = filled<float>(size * n, kFloat32, rank, &small_float);
  Tensor out = Tensor::empty({n}, kFloat32);
  comm.reduce_scatter(f, out, comm::ReduceOp::kSum);
  expect_elements<float>(out, [&](std::int64_t i) { return static_cast<float>(sum_of(first + i)); },
                         what + " reduce_scatter float32 sum");
  comm.reduce_scatter(f, out, comm::ReduceOp::kMean);
  expect_elements<float>(
      out, [&](std::int64_t i) { return static_cast<float>(sum_of(first + i)) / static_cast<float>(size); },
      what + " reduce_scatter float32 mean");

  Tensor l = filled<std::int64_t>(size * n, kInt64, rank, &small_int64);
  Tensor l_out = Tensor::empty({n}, kInt64);
  comm.reduce_scatter(l, l_out);
  expect_elements<std::int64_t>(l_out, [&](std::int64_t i) { return sum_of(first + i) * 1000003; },
                                what + " reduce_scatter int64 sum");

  Tensor w = filled<std::int32_t>(size * n, kInt32, rank, &wrapping_value);
  Tensor w_out = Tensor::empty({n}, kInt32), w_naive = Tensor::empty({n}, kInt32);
  comm.reduce_scatter(w, w_out);
  naive.reduce_scatter(w, w_naive);
  EXPECT_EQ(w_out.to_vector<std::int32_t>(), w_naive.to_vector<std::int32_t>()) << what << " reduce_scatter int32";

  check_allgather<float>(comm, n, kFloat32, what);
  check_allgather<std::int32_t>(comm, n, kInt32, what);
  check_allgather<std::int64_t>(comm, n, kInt64, what);
  check_allgather<float>(comm, n, kBFloat16, what);
  check_allgather<float>(comm, n, kFloat16, what);
}

// Blocks that are empty, of one element, not a whole cache line, one chunk's worth and a
// remainder, and several chunks (the window's columns hold chunk / (ranks * nodes) elements).
std::vector<std::int64_t> block_sizes(std::int64_t chunk_floats) {
  std::vector<std::int64_t> sizes = {0, 1, 17, 1000};
  if (chunk_floats > 0) sizes.insert(sizes.end(), {chunk_floats / 3 + 1, 2 * chunk_floats + 5});
  else sizes.push_back(300007);
  return sizes;
}

void check_scatter_gather_layouts(std::int64_t chunk_bytes, bool window,
                                  std::optional<WindowStoresSetting> stores = std::nullopt) {
  for_each_layout(chunk_bytes, window, stores, [&](comm::Communicator& comm, const std::string& where) {
    for (const std::int64_t n : block_sizes(chunk_bytes / 4)) check_scatter_gather(comm, n, where);
  });
}

TEST(HostScatterGather, SharedWindowInSeveralChunks) { check_scatter_gather_layouts(2048, true); }

TEST(HostScatterGather, SharedWindowColumnsSmallerThanACacheLine) { check_scatter_gather_layouts(64, true); }

TEST(HostScatterGather, SharedWindowDefaultChunk) { check_scatter_gather_layouts(0, true); }

TEST(HostScatterGather, SharedWindowWithStreamingStores) {
  check_scatter_gather_layouts(2048, true, WindowStoresSetting::kStreaming);
}

TEST(HostScatterGather, MessagePassingWhereNodesCannotShareMemory) { check_scatter_gather_layouts(0, false); }

// MPI calls cut into pieces: the inter-node step of several nodes beyond the count limit.
TEST(HostScatterGather, InterNodeStepChunkedAboveTheCountLimit) {
  comm::test_hooks::set_max_count(5);
  check_scatter_gather_layouts(2048, true);
  comm::test_hooks::set_max_count(0);
}

// Arguments are checked before the window is touched: every rank throws, none waits.
TEST(HostScatterGather, BadArgumentsThrowOnEveryRank) {
  for (const char* name : {"hierarchical", "two_dimensional"}) {
    if (!works_on_this_layout(name)) continue;
    auto& comm = communicator(name);
    Tensor recv = Tensor::empty({3}, kInt32);
    EXPECT_THROW(comm.reduce_scatter(Tensor::zeros({3 * comm.size()}, kInt32), recv, comm::ReduceOp::kMean), Error)
        << name;
    Tensor half = Tensor::empty({3}, kFloat16);
    EXPECT_THROW(comm.reduce_scatter(Tensor::zeros({3 * comm.size()}, kFloat16), half), Error) << name;
    Tensor wrong = Tensor::empty({3 * comm.size() + 1}, kFloat32);
    EXPECT_THROW(comm.allgather(Tensor::zeros({3}, kFloat32), wrong), Error) << name;
    // And the communicator still works afterwards.
    check_scatter_gather(comm, 5, name);
  }
}

TEST(HostAllreduce, SharedWindowInSeveralChunks) { check_layouts(2048, true); }

TEST(HostAllreduce, SharedWindowChunksSmallerThanACacheLinePerRank) { check_layouts(64, true); }

TEST(HostAllreduce, SharedWindowDefaultChunk) {
  // The default chunk is large; a buffer of a few of them runs the production path end to end.
  const int size = communicator("naive").size();
  for (const char* name : {"hierarchical", "two_dimensional"}) {
    if (!works_on_this_layout(name)) continue;
    auto& comm = communicator(name);
    const std::int64_t n = (std::int64_t{5} << 20) + 3;  // beyond the largest chunk of 4 MiB
    Tensor f = filled<float>(n, kFloat32, comm.rank(), &small_float);
    comm.allreduce(f);
    expect_elements<float>(
        f,
        [&](std::int64_t i) {
          std::int64_t s = 0;
          for (int r = 0; r < size; ++r) s += small_value(r, i);
          return static_cast<float>(s);
        },
        std::string(name) + " n=" + std::to_string(n));
  }
}

// The two kinds of stores into the window, each on its own: the measured default switches
// between them as the chunks' times say, so it may not run both in every run. Streaming stores
// cover whole 16-byte pieces; the chunk sizes leave heads and tails of every length around them.
TEST(HostAllreduce, SharedWindowWithOrdinaryStores) {
  check_layouts(2048, true, WindowStoresSetting::kCached);
}

TEST(HostAllreduce, SharedWindowWithStreamingStores) {
  check_layouts(2048, true, WindowStoresSetting::kStreaming);
  check_layouts(64, true, WindowStoresSetting::kStreaming);
}

TEST(HostAllreduce, MessagePassingWhereNodesCannotShareMemory) { check_layouts(0, false); }

TEST(HostAllreduce, SynchronizedReportsEveryPhase) {
  for (const char* name : {"hierarchical", "two_dimensional"}) {
    if (!works_on_this_layout(name)) continue;
    auto& comm = communicator(name);
    comm.set_synchronized(true);
    Tensor f = Tensor::full({100000}, comm.rank() + 1.0, kFloat32);
    comm.allreduce(f, comm::ReduceOp::kMean);
    comm.set_synchronized(false);
    EXPECT_EQ(f.to_vector<float>(), std::vector<float>(100000, (comm.size() + 1) / 2.0f)) << name;
    ASSERT_EQ(comm.last_phases().size(), 3u) << name;
    for (const auto& p : comm.last_phases()) EXPECT_GE(p.seconds, 0.0) << name << " " << p.name;
  }
}

}  // namespace
}  // namespace dpl::test
