// The agreement of hierarchical with naive, and the errors a caller gets for bad names and inputs
// (data-parallel use of the communicators: gradient_reducer_test.cpp).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "dist_test_util.hpp"
#include "comm/mpi/test_hooks.hpp"
#include "dpl/comm.hpp"
#include "dpl/config.hpp"

namespace dpl::test {
namespace {

const std::vector<std::string> kNames = host_communicator_names();

// Expects fn to throw dpl::Error whose message contains every one of parts.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' missing in: " << what;
    return;
  }
  ADD_FAILURE() << "expected a dpl::Error mentioning '" << *parts.begin() << "'";
}

// --- hierarchical against naive ------------------------------------------------------------------

template <typename T>
Tensor random_buffer(std::int64_t n, std::uint64_t seed) {
  Generator gen(seed);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    if constexpr (std::is_floating_point_v<T>) {
      x = gen.normal(0.0f, 1.0f);
    } else {
      x = static_cast<T>(static_cast<std::int64_t>(gen.below(2000001)) - 1000000);
    }
  }
  return Tensor::from_vector(v, {n});
}

TEST(Hierarchical, EqualsNaiveBitForBitOnIntegers) {
  auto& naive = communicator("naive");
  auto& hier = communicator("hierarchical");
  for (std::int64_t n : {1, 17, 100003}) {
    const auto seed = 17 + static_cast<std::uint64_t>(naive.rank());
    Tensor a = random_buffer<std::int32_t>(n, seed);
    Tensor b = a.clone();
    naive.allreduce(a);
    hier.allreduce(b);
    EXPECT_EQ(a.to_vector<std::int32_t>(), b.to_vector<std::int32_t>()) << "int32, n=" << n;

    Tensor c = random_buffer<std::int64_t>(n, seed);
    Tensor d = c.clone();
    naive.allreduce(c);
    hier.allreduce(d);
    EXPECT_EQ(c.to_vector<std::int64_t>(), d.to_vector<std::int64_t>()) << "int64, n=" << n;
  }
}

TEST(TwoDimensionalAndFlat, EqualNaiveBitForBitOnIntegersAlsoInChunks) {
  auto& naive = communicator("naive");
  for (std::int64_t limit : {std::int64_t{0}, std::int64_t{1000}}) {
    comm::test_hooks::set_max_count(limit);  // 1000: the chunked path on small buffers
    for (const char* name : {"two_dimensional", "flat"}) {
      if (!works_on_this_layout(name)) continue;
      auto& other = communicator(name);
      for (std::int64_t n : {1, 17, 100003}) {
        Tensor a = random_buffer<std::int32_t>(n, 41 + static_cast<std::uint64_t>(naive.rank()));
        Tensor b = a.clone();
        naive.allreduce(a);
        other.allreduce(b);
        EXPECT_EQ(a.to_vector<std::int32_t>(), b.to_vector<std::int32_t>()) << name << " n=" << n << " limit=" << limit;
      }
      Tensor f = Tensor::full({1001}, naive.rank() + 1.0, kFloat32);
      other.allreduce(f, comm::ReduceOp::kMean);
      EXPECT_EQ(f.to_vector<float>(), std::vector<float>(1001, (naive.size() + 1) / 2.0f)) << name;
    }
  }
  comm::test_hooks::set_max_count(0);
  if (!works_on_this_layout("two_dimensional")) return;
  const auto& phases = communicator("two_dimensional").last_phases();
  ASSERT_EQ(phases.size(), 3u);
  EXPECT_EQ(phases[0].name, "intra_reduce");
  EXPECT_EQ(phases[1].name, "inter_allreduce");
  EXPECT_EQ(phases[2].name, "intra_gather");
}

TEST(Hierarchical, EqualsNaiveToRoundingOnFloats) {
  auto& naive = communicator("naive");
  auto& hier = communicator("hierarchical");
  for (auto op : {comm::ReduceOp::kSum, comm::ReduceOp::kMean}) {
    const std::int64_t n = 100003;
    Tensor a = random_buffer<float>(n, 99 + static_cast<std::uint64_t>(naive.rank()));
    Tensor b = a.clone();
    naive.allreduce(a, op);
    hier.allreduce(b, op);
    const auto x = a.to_vector<float>();
    const auto y = b.to_vector<float>();
    // Summation order differs; each partial sum of size() unit normals rounds by at most
    // about size() ulps of the largest term.
    const float tol = 8.0f * static_cast<float>(naive.size()) * 1.2e-7f * 8.0f;
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < n; ++i) wrong += std::abs(x[i] - y[i]) > tol;
    EXPECT_EQ(wrong, 0) << (op == comm::ReduceOp::kSum ? "sum" : "mean");
  }
}

TEST(Hierarchical, RecordsItsSubPhases) {
  auto& hier = communicator("hierarchical");
  auto& naive = communicator("naive");
  for (bool sync : {false, true}) {
    hier.set_synchronized(sync);
    Tensor buf = Tensor::full({1000}, hier.rank() + 1.0, kFloat32);
    hier.allreduce(buf, comm::ReduceOp::kMean);
    hier.set_synchronized(false);
    const auto& phases = hier.last_phases();
    ASSERT_EQ(phases.size(), 3u);  // local: the same on every rank
    EXPECT_EQ(phases[0].name, "intra_reduce");
    EXPECT_EQ(phases[1].name, "inter_allreduce");
    EXPECT_EQ(phases[2].name, "intra_bcast");
    for (const auto& p : phases) EXPECT_GE(p.seconds, 0.0) << p.name;
    const float want = (hier.size() + 1) / 2.0f;
    EXPECT_EQ(buf.to_vector<float>(), std::vector<float>(1000, want)) << "synchronized=" << sync;
  }
  Tensor buf = Tensor::ones({10});
  naive.allreduce(buf);
  EXPECT_TRUE(naive.last_phases().empty());
}

// --- names and bad inputs ------------------------------------------------------------------------

TEST(Errors, NamesAndUnknownName) {
  std::vector<std::string> all = {"naive", "hierarchical", "two_dimensional", "flat"};
  if (DPL_WITH_NCCL) all.insert(all.end(), {"pure_nccl", "single_node"});
  EXPECT_EQ(comm::communicator_names(), all);
  expect_error([] { comm::create_communicator("nccl_please"); }, {"'nccl_please'", "'naive'", "'hierarchical'"});
}

// Ranks that ask for different communicators (or options) are refused together before the
// algorithms' own collectives could hang on the mismatch; every rank names what each one asked.
TEST(Errors, RanksAskingForDifferentCommunicatorsAreRefusedTogether) {
  const int rank = communicator("naive").rank(), size = communicator("naive").size();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  const std::string mine = rank == size - 1 ? "two_dimensional" : "hierarchical";
  std::string what;
  try {
    comm::create_communicator(mine);
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("asked for different communicators"), std::string::npos) << what;
  const std::string first = size == 2 ? "rank 0 has hierarchical" : "ranks 0, 1";
  EXPECT_NE(what.find("setting 'communicator' differs between ranks: " + first), std::string::npos) << what;
  EXPECT_NE(what.find("rank " + std::to_string(size - 1) + " has two_dimensional"), std::string::npos) << what;
  EXPECT_EQ(what.find("allreduce_dtype"), std::string::npos) << what;  // only what differs is named
  // The same text on every rank, and the ranks can still talk.
  EXPECT_TRUE(comm::ranks_differing_from_rank0(communicator("naive"), what).empty());
  communicator("naive").barrier();
}

TEST(Errors, BadBuffersThrowBeforeCommunicating) {
  for (const auto& name : kNames) {
    auto& comm = communicator(name);
    const int p = comm.size();
    const std::string ar = "allreduce (" + name + ")";

    Tensor strided = Tensor::zeros({4, 3}).narrow(1, 0, 2);
    expect_error([&] { comm.allreduce(strided); }, {ar, "contiguous", "(4, 2)"});
    Tensor undefined;
    expect_error([&] { comm.allreduce(undefined); }, {ar, "undefined"});
    Tensor half = Tensor::empty({4}, kBFloat16);
    expect_error([&] { comm.allreduce(half); }, {ar, "float32, int32 or int64", "bfloat16"});
    Tensor ints = Tensor::zeros({4}, kInt32);
    expect_error([&] { comm.allreduce(ints, comm::ReduceOp::kMean); }, {ar, "kMean", "int32"});

    Tensor buf = Tensor::zeros({4});
    expect_error([&] { comm.broadcast(buf, p); }, {"broadcast (" + name + ")", "root", std::to_string(p)});
    expect_error([&] { comm.broadcast(buf, -1); }, {"broadcast (" + name + ")", "-1"});

    const std::string ag = "allgather (" + name + ")";
    Tensor small = Tensor::zeros({p * 4 - 1});
    expect_error([&] { comm.allgather(buf, small); }, {ag, std::to_string(p * 4), std::to_string(p * 4 - 1)});
    Tensor wrong_type = Tensor::zeros({p * 4}, kInt64);
    expect_error([&] { comm.allgather(buf, wrong_type); }, {ag, "float32", "int64"});
    Tensor big = Tensor::zeros({p * 4});
    if (p > 1) {
      Tensor not_own_block = big.view_range(comm.rank() == 0 ? 1 : 0, {4});
      expect_error([&] { comm.allgather(not_own_block, big); }, {ag, "overlap"});
    }

    const std::string rs = "reduce_scatter (" + name + ")";
    Tensor recv = Tensor::zeros({4});
    if (p > 1) {
      Tensor indivisible = Tensor::zeros({p * 4 + 1});
      expect_error([&] { comm.reduce_scatter(indivisible, recv); },
                   {rs, "divisible", std::to_string(p), std::to_string(p * 4 + 1)});
    }
    Tensor recv_wrong = Tensor::zeros({5});
    expect_error([&] { comm.reduce_scatter(big, recv_wrong); }, {rs, "4", "5"});
    Tensor recv_int = Tensor::zeros({4}, kInt32);
    expect_error([&] { comm.reduce_scatter(big, recv_int); }, {rs, "float32", "int32"});
    Tensor aliased = big.view_range(0, {4});
    expect_error([&] { comm.reduce_scatter(big, aliased); }, {rs, "overlap"});

    expect_error([&] { comm.send(buf, comm.rank()); }, {"send (" + name + ")", "this rank"});
    expect_error([&] { comm.send(buf, p); }, {"send (" + name + ")", std::to_string(p)});
    expect_error([&] { comm.recv(buf, -2); }, {"recv (" + name + ")", "-2"});
    if (p > 1) expect_error([&] { comm.send(buf, (comm.rank() + 1) % p, -1); }, {"send (" + name + ")", "tag"});
  }
}

TEST(Errors, RecvOfTheWrongSizeThrowsOnTheReceiver) {
  auto& comm = communicator("naive");
  if (comm.size() < 2) GTEST_SKIP() << "needs two ranks";
  // Small messages: MPI sends them eagerly, so the sender is done whatever the receiver makes of
  // them, and only the receiver throws.
  if (comm.rank() == 0) {
    comm.send(Tensor::ones({5}), 1, 11);
    comm.send(Tensor::ones({10}), 1, 12);
  } else if (comm.rank() == 1) {
    Tensor six = Tensor::zeros({6});
    expect_error([&] { comm.recv(six, 0, 11); }, {"recv (naive)", "6", "received 5"});
    Tensor five = Tensor::zeros({5});
    expect_error([&] { comm.recv(five, 0, 12); }, {"recv (naive)", "more than", "5"});
  }
  comm.barrier();
}

}  // namespace
}  // namespace dpl::test
