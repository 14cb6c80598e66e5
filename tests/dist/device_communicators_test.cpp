// The communicators on GPU buffers: every name of the build, float32 and integer allreduce at
// sizes 1, 17, 1000003 and 25,557,032 elements, the gradient arena reduced in float32, bfloat16 and float16,
// and the other collectives. Inputs are small integers, so every sum is exact (also in 16 bits)
// and results are compared for equality. Skips without a GPU.
//
// Each rank takes GPU (rank on its physical host) % GPUs, so virtual nodes on one machine
// (DPL_RANKS_PER_NODE=1 with 2 GPUs) still give each rank its own GPU. Where a host has more ranks
// than GPUs, NCCL cannot run (one rank per GPU); pure_nccl and single_node are skipped there and
// the others fall back to MPI, which is checked the same way.
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist_test_util.hpp"
#include "dpl/comm.hpp"
#include "dpl/config.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/nn.hpp"
#include "dpl/parallel/gradient_reducer.hpp"

namespace dpl::test {
namespace {

// One parameter of n elements: an arena of (about) n gradients.
class FlatModel : public nn::Module {
 public:
  explicit FlatModel(std::int64_t n) { register_parameter("w", Tensor::zeros({n})); }
  Variable forward(const Variable& x) override { return x; }
};

class DeviceComm : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
    const HostPlace place = host_place();
    const bool shared_gpus = place.local_size > cuda_device_count();
    const std::string& name = GetParam();
    if ((name == "pure_nccl" || name == "single_node") && shared_gpus)
      GTEST_SKIP() << name << " needs one GPU per rank (" << place.local_size << " ranks, " << cuda_device_count()
                   << " GPUs)";
    if (name == "single_node" && communicator("naive").inter_size() > 1) GTEST_SKIP() << "single_node: one node only";
    if (!works_on_this_layout(name)) GTEST_SKIP() << name << ": refuses uneven nodes";
    device_ = Device::cuda(place.local_rank % cuda_device_count());
    cuda::set_device(device_.index);
  }

  // (i * 7 + salt) % 13: integer-valued, so sums in any order are exact.
  static std::vector<float> values(std::int64_t n, int salt) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>((i * 7 + salt) % 13);
    return v;
  }
  static std::vector<float> summed(std::int64_t n, int ranks, int salt0) {
    std::vector<float> s(static_cast<std::size_t>(n), 0.f);
    for (int r = 0; r < ranks; ++r) {
      const auto v = values(n, salt0 + r);
      for (std::size_t i = 0; i < s.size(); ++i) s[i] += v[i];
    }
    return s;
  }
  Device device_;
};

std::int64_t mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return static_cast<std::int64_t>(std::max(a.size(), b.size()));
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) bad += a[i] != b[i];
  return bad;
}

TEST_P(DeviceComm, AllreduceSumAndMeanAreExact) {
  auto& comm = communicator(GetParam());
  const int p = comm.size();
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{17}, std::int64_t{1000003}, std::int64_t{25557032}}) {
    Tensor buf = Tensor::from_vector<float>(values(n, comm.rank()), {n}).to(device_);
    comm.allreduce(buf, comm::ReduceOp::kSum);
    const auto want = summed(n, p, 0);
    EXPECT_EQ(mismatches(buf.to_vector<float>(), want), 0) << GetParam() << " sum n=" << n;

    Tensor mean = Tensor::from_vector<float>(values(n, comm.rank()), {n}).to(device_);
    comm.allreduce(mean, comm::ReduceOp::kMean);
    auto want_mean = want;
    for (float& x : want_mean) x /= static_cast<float>(p);
    EXPECT_EQ(mismatches(mean.to_vector<float>(), want_mean), 0) << GetParam() << " mean n=" << n;
  }
  std::vector<std::int32_t> iv(1001);
  for (std::size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<std::int32_t>(i) + comm.rank();
  Tensor ints = Tensor::from_vector<std::int32_t>(iv, {1001}).to(device_);
  comm.allreduce(ints, comm::ReduceOp::kSum);
  const auto got = ints.to_vector<std::int32_t>();
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != static_cast<std::int32_t>(i) * p + p * (p - 1) / 2;
  EXPECT_EQ(bad, 0) << GetParam() << " int32";
}

TEST_P(DeviceComm, AllreduceGradInEveryDtype) {
  const std::string name = GetParam();
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    if (dt != kFloat32 && !reduces_16bit(name)) continue;
    auto& comm = communicator_with(name, dt);
    const int p = comm.size();
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{17}, std::int64_t{1000003}, std::int64_t{25557032}}) {
      FlatModel model(n);
      model.to(device_);
      const std::int64_t len = model.arena().numel();
      // Small integers (at most 4 + rank): exact in bfloat16 and float16, and so are their sums.
      std::vector<float> g(static_cast<std::size_t>(len));
      for (std::int64_t i = 0; i < len; ++i) g[static_cast<std::size_t>(i)] = static_cast<float>(i % 5 + comm.rank());
      Tensor grads = model.arena().grads();
      grads.copy_(Tensor::from_vector<float>(g, {len}));
      parallel::allreduce_gradients(model, comm);
      std::vector<float> want(static_cast<std::size_t>(len));
      for (std::int64_t i = 0; i < len; ++i)
        want[static_cast<std::size_t>(i)] = static_cast<float>((i % 5) * p + p * (p - 1) / 2) / static_cast<float>(p);
      EXPECT_EQ(mismatches(model.arena().grads().to_vector<float>(), want), 0)
          << name << " " << dt << " n=" << n << " (arena " << len << ")";
    }
  }
}

TEST_P(DeviceComm, SubPhasesHaveTheSameNamesOnEveryRank) {
  auto& comm = communicator(GetParam());
  Tensor buf = Tensor::ones({4096}, TensorOptions(kFloat32, device_));
  comm.allreduce(buf);
  comm.allreduce(buf);
  std::string names;
  for (const auto& ph : comm.last_phases()) names += ph.name + ",";
  // Every rank gathers rank 0's list length and compares its own.
  int len = static_cast<int>(names.size()), len0 = len;
  comm::Communicator& naive = communicator("naive");
  Tensor l = Tensor::from_vector<std::int32_t>({len}, {1});
  naive.broadcast(l, 0);
  len0 = l.to_vector<std::int32_t>()[0];
  EXPECT_EQ(len, len0) << GetParam() << ": phases " << names;
  const std::string& n = GetParam();
  // With one node, hierarchical and two_dimensional are one NCCL allreduce and report none.
  if (n == "flat" || ((n == "hierarchical" || n == "two_dimensional") && comm.inter_size() > 1)) {
    EXPECT_NE(names.find("inter_allreduce"), std::string::npos) << names;
  }
  for (const auto& ph : comm.last_phases()) EXPECT_GE(ph.seconds, 0.0) << ph.name;
}

TEST_P(DeviceComm, OtherCollectivesOnTheGpu) {
  auto& comm = communicator(GetParam());
  const int p = comm.size();
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{17}, std::int64_t{1000003}}) {
    Tensor b = Tensor::from_vector<float>(values(n, comm.rank() + 3), {n}).to(device_);
    comm.broadcast(b, p - 1);
    EXPECT_EQ(mismatches(b.to_vector<float>(), values(n, p - 1 + 3)), 0) << GetParam() << " broadcast n=" << n;

    Tensor send = Tensor::from_vector<float>(values(n, comm.rank() + 5), {n}).to(device_);
    Tensor recv = Tensor::full({n * p}, -1.0, device_);
    comm.allgather(send, recv);
    std::vector<float> want;
    for (int r = 0; r < p; ++r) {
      const auto v = values(n, r + 5);
      want.insert(want.end(), v.begin(), v.end());
    }
    EXPECT_EQ(mismatches(recv.to_vector<float>(), want), 0) << GetParam() << " allgather n=" << n;

    Tensor rs_send = Tensor::from_vector<float>(values(n * p, comm.rank()), {n * p}).to(device_);
    Tensor rs_recv = Tensor::full({n}, -1.0, device_);
    comm.reduce_scatter(rs_send, rs_recv);
    const auto all = summed(n * p, p, 0);
    std::vector<float> mine(all.begin() + comm.rank() * n, all.begin() + (comm.rank() + 1) * n);
    EXPECT_EQ(mismatches(rs_recv.to_vector<float>(), mine), 0) << GetParam() << " reduce_scatter n=" << n;
  }
  // A ring of sends: rank r sends to r+1 and receives from r-1 (even ranks send first).
  if (p > 1) {
    const std::int64_t n = 1000;
    Tensor out = Tensor::from_vector<float>(values(n, comm.rank()), {n}).to(device_);
    Tensor in = Tensor::full({n}, -1.0, device_);
    const int to = (comm.rank() + 1) % p, from = (comm.rank() + p - 1) % p;
    if (comm.rank() % 2 == 0) {
      comm.send(out, to, 7);
      comm.recv(in, from, 7);
    } else {
      comm.recv(in, from, 7);
      comm.send(out, to, 7);
    }
    EXPECT_EQ(mismatches(in.to_vector<float>(), values(n, from)), 0) << GetParam() << " send/recv";
  }
}

TEST(DeviceCommOptions, SingleNodeRefusesSeveralNodesAndNaiveRefuses16Bit) {
  try {
    comm::create_communicator("naive", comm::CommOptions{kBFloat16});
    ADD_FAILURE() << "naive accepted a bfloat16 allreduce_dtype";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float32 only"), std::string::npos) << e.what();
  }
  if (!DPL_WITH_NCCL) return;
  if (communicator("naive").inter_size() > 1) {
    try {
      comm::create_communicator("single_node");
      ADD_FAILURE() << "single_node accepted a job over several nodes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("one node only"), std::string::npos) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Names, DeviceComm, ::testing::ValuesIn(comm::communicator_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dpl::test
