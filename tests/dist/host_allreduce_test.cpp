// The host allreduce of hierarchical and two_dimensional (the node's shared window, and the
// message-passing path kept for nodes that cannot share memory) against sums every rank can
// predict, on every node layout this job allows: one node, every even split, uneven nodes.

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

void check_layouts(std::int64_t chunk_bytes, bool window,
                   std::optional<WindowStoresSetting> stores = std::nullopt) {
  const int size = communicator("naive").size();
  for (const auto& layout : layouts(size)) {
    std::optional<ScopedEnv> env;  // none: this run's own layout
    if (!layout.empty()) env.emplace("DPL_RANKS_PER_NODE", layout);
    const bool even = layout.empty() ? !uneven_nodes() : !uneven(layout);
    for (const char* name : {"hierarchical", "two_dimensional"}) {
      if (!even && std::string(name) == "two_dimensional") continue;  // refused; topology_test checks how
      std::shared_ptr<comm::Communicator> comm;
      {
        const SharedPathSetup setup(chunk_bytes, window, stores);
        comm = comm::create_communicator(name);
      }
      const std::string where = std::string(name) + " DPL_RANKS_PER_NODE=" + (layout.empty() ? "as launched" : layout) +
                                " chunk=" + std::to_string(chunk_bytes) + (window ? "" : " no window");
      for (const std::int64_t n : sizes_for(size, chunk_bytes / 4)) check_size(*comm, n, where);
      ASSERT_EQ(comm->last_phases().size(), 3u) << where;
      EXPECT_EQ(comm->last_phases()[0].name, "intra_reduce") << where;
      EXPECT_EQ(comm->last_phases()[1].name, "inter_allreduce") << where;
    }
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
