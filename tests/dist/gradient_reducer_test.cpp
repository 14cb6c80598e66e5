// GradientReducer on every communicator of the build: rank 0's parameters everywhere, the mean
// gradient, the refusal of differing models, the 16-bit wire, and the free-function spelling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dist_test_util.hpp"
#include "dpl/comm.hpp"
#include "dpl/config.hpp"
#include "dpl/core/cuda.hpp"
#include "dpl/nn.hpp"
#include "dpl/parallel/gradient_reducer.hpp"
#include "support/expect_error.hpp"

namespace dpl::test {
namespace {

const std::vector<std::string> kNames = host_communicator_names();

// Sets every parameter's gradient to rank + k (padding stays zero).
void fill_gradients(nn::Module& model, float value) {
  nn::ParameterArena& arena = model.arena();
  Tensor grads = arena.grads();
  for (const auto& e : arena.entries()) {
    Tensor g = grads.view_range(e.offset, {e.numel});
    g.fill_(value);
  }
}

// Gradient elements that are not `want`, and padding elements that are not zero.
struct GradientCheck {
  std::int64_t wrong = 0;
  std::int64_t dirty_padding = 0;
};

GradientCheck check_gradients(nn::Module& model, float want) {
  const nn::ParameterArena& arena = model.arena();
  const std::vector<float> g = arena.grads().to_vector<float>();
  std::vector<bool> in_param(g.size(), false);
  GradientCheck out;
  for (const auto& e : arena.entries()) {
    for (std::int64_t i = e.offset; i < e.offset + e.numel; ++i) {
      in_param[static_cast<std::size_t>(i)] = true;
      out.wrong += std::abs(g[static_cast<std::size_t>(i)] - want) > 1e-6f;
    }
  }
  for (std::size_t i = 0; i < g.size(); ++i) out.dirty_padding += !in_param[i] && g[i] != 0.0f;
  return out;
}

TEST(GradientReducer, BroadcastLeavesRankZerosWeightsEverywhere) {
  for (const auto& name : kNames) {
    const auto& shared = shared_communicator(name);
    auto& comm = *shared;
    Generator gen(1000 + static_cast<std::uint64_t>(comm.rank()));  // different weights per rank
    nn::MLP model(16, 12, 5, gen);
    const std::vector<float> before = model.arena().params().to_vector<float>();
    parallel::GradientReducer reducer(model, shared);
    EXPECT_TRUE(reducer.needs_broadcast()) << name;

    reducer.broadcast_parameters();

    EXPECT_FALSE(reducer.needs_broadcast()) << name;
    const Tensor params = model.arena().params();
    Tensor all = Tensor::empty({comm.size() * params.numel()}, kFloat32);
    comm.allgather(params, all);
    const std::vector<float> v = all.to_vector<float>();
    const std::int64_t n = params.numel();
    std::int64_t differing = 0;
    for (int r = 1; r < comm.size(); ++r)
      for (std::int64_t i = 0; i < n; ++i) differing += v[r * n + i] != v[i];
    EXPECT_EQ(differing, 0) << name << ": elements that differ from rank 0's";
    if (comm.rank() != 0) {
      EXPECT_NE(before, params.to_vector<float>()) << name << ": the weights did not change";
    }

    // The layers see the new values: their parameters are views of the arena.
    for (const auto& [pname, var] : model.named_parameters()) {
      const auto& e = *std::find_if(model.arena().entries().begin(), model.arena().entries().end(),
                                    [&](const nn::ArenaEntry& x) { return x.name == pname; });
      const std::vector<float> got = var.data().to_vector<float>();
      const std::vector<float> want(v.begin() + e.offset, v.begin() + e.offset + e.numel);
      EXPECT_EQ(got, want) << name << ": parameter " << pname;
    }
  }
}

TEST(GradientReducer, AllreduceGivesTheMeanOverRanks) {
  for (const auto& name : kNames) {
    const auto& shared = shared_communicator(name);
    auto& comm = *shared;
    Generator gen(7);
    nn::MLP model(16, 12, 5, gen);
    const float k = 0.25f;
    fill_gradients(model, static_cast<float>(comm.rank()) + k);
    parallel::GradientReducer reducer(model, shared);

    reducer.allreduce_gradients();

    const float want = static_cast<float>(comm.size() - 1) / 2.0f + k;
    const GradientCheck c = check_gradients(model, want);
    EXPECT_EQ(c.wrong, 0) << name << ": gradients that are not " << want;
    EXPECT_EQ(c.dirty_padding, 0) << name << ": padding between parameters must stay zero";
    for (const auto& [pname, var] : model.named_parameters())
      EXPECT_FLOAT_EQ(var.grad().to_vector<float>().front(), want) << name << ": " << pname;
    if (comm.size() == 1) {
      EXPECT_TRUE(reducer.last_phases().empty()) << name << ": one rank communicates nothing";
    }
  }
}

TEST(GradientReducer, FreeFunctionsDoTheSame) {
  auto& comm = communicator("hierarchical");
  Generator gen(40 + static_cast<std::uint64_t>(comm.rank()));
  nn::MLP model(6, 5, 3, gen);
  Generator gen0(40);
  nn::MLP rank0(6, 5, 3, gen0);
  parallel::broadcast_parameters(model, comm);
  EXPECT_EQ(model.arena().params().to_vector<float>(), rank0.arena().params().to_vector<float>());
  fill_gradients(model, static_cast<float>(2 * comm.rank()));
  parallel::allreduce_gradients(model, comm);
  EXPECT_EQ(check_gradients(model, static_cast<float>(comm.size() - 1)).wrong, 0);
}

// A model that can gain a parameter after its arena was packed.
class Growing : public nn::Module {
 public:
  Growing() { register_parameter("a", Tensor::ones({3})); }
  void grow() { register_parameter("b", Tensor::ones({2})); }
  Variable forward(const Variable& x) override { return x; }
};

TEST(GradientReducer, ANewParameterAsksForAnotherBroadcast) {
  Growing model;
  parallel::GradientReducer reducer(model, shared_communicator("naive"));
  reducer.broadcast_parameters();
  EXPECT_FALSE(reducer.needs_broadcast());
  model.grow();
  EXPECT_TRUE(reducer.needs_broadcast());
  reducer.broadcast_parameters();
  EXPECT_FALSE(reducer.needs_broadcast());
}

TEST(GradientReducer, DifferentModelsAreRefusedOnEveryRankWithTheSameMessage) {
  if (communicator("naive").size() < 2) GTEST_SKIP() << "needs two ranks";
  for (const auto& name : kNames) {
    const auto& shared = shared_communicator(name);
    auto& comm = *shared;
    Generator gen(3);
    nn::MLP model(comm.rank() == 1 ? 17 : 16, 12, 5, gen);
    parallel::GradientReducer reducer(model, shared);
    const std::string what = error_message([&] { reducer.broadcast_parameters(); });
    for (const std::string& part : std::vector<std::string>{"GradientReducer.broadcast_parameters (" + name + ")", "the models differ",
                                   "rank(s) 1 differ from rank 0", "Rank 1: expected parameter 'l1.weight (16, 12) float32'",
                                   "got 'l1.weight (17, 12) float32'"})
      EXPECT_NE(what.find(part), std::string::npos) << "'" << part << "' missing in: " << what;
    EXPECT_TRUE(comm::ranks_differing_from_rank0(comm, what).empty()) << name << ": not the same error everywhere";
    EXPECT_TRUE(reducer.needs_broadcast()) << name << ": nothing was broadcast";
  }
}

// A layer with running statistics: a parameter and two buffers of different dtypes.
class WithStatistics : public nn::Module {
 public:
  WithStatistics(std::int64_t channels, float fill, std::int64_t count) {
    register_parameter("weight", Tensor::full({channels}, fill));
    mean_ = register_buffer("running_mean", Tensor::full({channels}, fill));
    count_ = register_buffer("count", Tensor::from_vector<std::int64_t>({count}, {1}));
  }
  Variable forward(const Variable& x) override { return x; }
  Variable mean_, count_;
};

TEST(GradientReducer, BuffersAreBroadcastFromRankZero) {
  for (const auto& name : kNames) {
    const auto& shared = shared_communicator(name);
    auto& comm = *shared;
    const float r = static_cast<float>(comm.rank());
    WithStatistics model(5, 1.f + r, 10 + comm.rank());
    parallel::GradientReducer(model, shared).broadcast_parameters();
    EXPECT_EQ(model.mean_.data().to_vector<float>(), std::vector<float>(5, 1.f)) << name;
    EXPECT_EQ(model.count_.data().to_vector<std::int64_t>(), std::vector<std::int64_t>{10}) << name;
  }
}

// Equal parameters, one buffer of another shape on the last rank: refused like a parameter.
class OddBuffer : public nn::Module {
 public:
  explicit OddBuffer(bool wide) {
    register_parameter("weight", Tensor::ones({4}));
    register_buffer("running_var", Tensor::ones({wide ? 3 : 2}));
  }
  Variable forward(const Variable& x) override { return x; }
};

TEST(GradientReducer, ARankWhoseBuffersDifferIsRefused) {
  if (communicator("naive").size() < 2) GTEST_SKIP() << "needs two ranks";
  for (const auto& name : kNames) {
    const auto& shared = shared_communicator(name);
    auto& comm = *shared;
    OddBuffer model(comm.rank() == comm.size() - 1);
    const std::string what = error_message([&] { parallel::GradientReducer(model, shared).broadcast_parameters(); });
    const std::string last = std::to_string(comm.size() - 1);
    for (const std::string& part : {std::string("the models differ"), "rank(s) " + last + " differ from rank 0",
                                    std::string("'buffer running_var (2,) float32'"),
                                    std::string("'buffer running_var (3,) float32'")})
      EXPECT_NE(what.find(part), std::string::npos) << "'" << part << "' missing in: " << what;
    EXPECT_TRUE(comm::ranks_differing_from_rank0(comm, what).empty()) << name << ": not the same error everywhere";
  }
}

TEST(GradientReducer, ModelWithoutParameters) {
  for (const auto& name : kNames) {
    nn::Sequential empty;
    parallel::GradientReducer reducer(empty, shared_communicator(name));
    EXPECT_NO_THROW(reducer.broadcast_parameters()) << name;
    EXPECT_NO_THROW(reducer.allreduce_gradients()) << name;
    EXPECT_TRUE(reducer.last_phases().empty()) << name;
  }
}

// The 16-bit wire carries a float32 arena on a GPU. Without a GPU (or without NCCL) it cannot
// run, and says so instead of reducing in another precision than asked.
TEST(GradientReducer, SixteenBitWire) {
  for (DType wire : {kBFloat16, kFloat16}) {
    const comm::CommOptions options{wire};
    if (!DPL_WITH_NCCL) {
      DPL_EXPECT_ERROR(comm::create_communicator("hierarchical", options),
                       ::testing::HasSubstr("reduces in float32 only"));
      continue;
    }
    std::shared_ptr<comm::Communicator> comm = comm::create_communicator("hierarchical", options);
    EXPECT_EQ(comm->options().allreduce_dtype, wire);
    nn::MLP model(16, 12, 5);
    if (cuda_device_count() > 0) model.to(Device::cuda(cuda::select_device_for_local_rank(comm->host_rank())));
    // Small integers: exact in both 16-bit types, and so are their sums and the mean here.
    fill_gradients(model, static_cast<float>(2 * comm->rank() + 1));
    parallel::GradientReducer reducer(model, comm);
    if (model.device().is_cuda()) {
      reducer.allreduce_gradients();
      EXPECT_EQ(check_gradients(model, static_cast<float>(comm->size())).wrong, 0) << wire;
    } else if (comm->size() > 1) {
      DPL_EXPECT_ERROR(reducer.allreduce_gradients(),
                       ::testing::AllOf(::testing::HasSubstr("allreduce (hierarchical)"),
                                        ::testing::HasSubstr(dtype_name(wire)),
                                        ::testing::HasSubstr("needs a float32 buffer on a GPU, got a float32 buffer on cpu")));
    }
  }
}

TEST(GradientReducer, SixteenBitWireIsRefusedWhereOnlyFloat32Reduces) {
  auto& comm = communicator("naive");
  Tensor buf = Tensor::ones({8});
  DPL_EXPECT_ERROR(comm.allreduce(buf, comm::ReduceOp::kMean, kBFloat16),
                   ::testing::HasSubstr("allreduce (naive): a bfloat16 wire needs a float32 buffer on a GPU"));
  Tensor ints = Tensor::zeros({8}, kInt32);
  DPL_EXPECT_ERROR(comm.allreduce(ints, comm::ReduceOp::kSum, kFloat32),
                   ::testing::HasSubstr("allreduce (naive): expected the wire dtype int32 (the buffer's)"));
  // The buffer's own dtype is the plain allreduce.
  comm.allreduce(buf, comm::ReduceOp::kSum, kFloat32);
  EXPECT_EQ(buf.to_vector<float>(), std::vector<float>(8, static_cast<float>(comm.size())));
}

}  // namespace
}  // namespace dpl::test
