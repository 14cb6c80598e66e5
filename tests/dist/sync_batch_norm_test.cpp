// Synchronised BatchNorm under mpiexec: p ranks of b samples each must normalise, back-propagate
// and update their running statistics as one BatchNorm2d (or BatchNorm1d) on the p*b samples:
// outputs and input gradients equal the combined run's slices, the ranks' weight gradients sum to
// the combined run's, and every rank's running statistics equal the combined run's.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dist_test_util.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"

namespace {
using namespace dpl;

constexpr std::int64_t kPerRank = 3, kChannels = 4;

void expect_close(const Tensor& got, const Tensor& want, float tol, const std::string& what) {
  const std::vector<float> g = got.to(kFloat32).contiguous().to_vector<float>();
  const std::vector<float> w = want.to(kFloat32).contiguous().to_vector<float>();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], tol * (1.f + std::abs(w[i]))) << what << "[" << i << "]";
}

struct Case {
  DType dtype;
  bool channels_last;
  bool one_dimensional;  // BatchNorm1d on (N, C, L)
  float tol;
};

class SyncBatchNorm : public ::testing::TestWithParam<Case> {};

void check_against_combined_batch(const Case& c, const std::shared_ptr<comm::Communicator>& comm) {
  const int p = comm->size(), rank = comm->rank();
  const std::int64_t total = kPerRank * p;
  const Shape full_shape = c.one_dimensional ? Shape{total, kChannels, 6} : Shape{total, kChannels, 5, 3};
  Generator gen(21);
  // Inputs far from 0, so that a variance computed as E[x^2] - E[x]^2 without a shift would lose
  // digits; every rank draws the same combined batch and takes its slice.
  const Tensor x_full = Tensor::normal(full_shape, 3.f, 0.5f, gen);
  const Tensor w_full = Tensor::normal(full_shape, 0.f, 1.f, gen);  // the loss's weighting

  const auto make = [&]() -> std::shared_ptr<nn::BatchNormBase> {
    std::shared_ptr<nn::BatchNormBase> bn;
    if (c.one_dimensional) bn = std::make_shared<nn::BatchNorm1d>(kChannels);
    else bn = std::make_shared<nn::BatchNorm2d>(kChannels);
    Tensor w = bn->weight().data(), b = bn->bias().data();
    w.copy_(Tensor::from_vector(std::vector<float>{0.5f, 1.f, 1.5f, 2.f}, {kChannels}));
    b.copy_(Tensor::from_vector(std::vector<float>{-1.f, 0.f, 0.25f, 1.f}, {kChannels}));
    bn->running_mean().copy_(Tensor::full({kChannels}, 2.5f));
    return bn;
  };
  const auto input = [&](const Tensor& t) {
    Tensor v = t.to(c.dtype);
    if (c.channels_last) v = v.to_channels_last();
    return Variable(v, true);
  };

  // The combined run, on every rank.
  auto reference = make();
  Variable xr = input(x_full);
  Variable yr = (*reference)(xr);
  sum(mul(cast(yr, kFloat32), Variable(w_full))).backward();

  // The synchronised run on this rank's slice.
  auto layer = make();
  EXPECT_EQ(parallel::convert_sync_batchnorm(*layer, comm), 1u);
  EXPECT_EQ(layer->synchronizes_statistics(), p > 1);
  const Tensor x_mine = x_full.narrow(0, rank * kPerRank, kPerRank).contiguous();
  const Tensor w_mine = w_full.narrow(0, rank * kPerRank, kPerRank).contiguous();
  Variable xs = input(x_mine);
  Variable ys = (*layer)(xs);
  EXPECT_EQ(ys.dtype(), c.dtype);
  sum(mul(cast(ys, kFloat32), Variable(w_mine))).backward();

  expect_close(ys.data(), yr.data().narrow(0, rank * kPerRank, kPerRank), c.tol, "output");
  expect_close(xs.grad(), xr.grad().narrow(0, rank * kPerRank, kPerRank), c.tol, "input gradient");
  for (const auto& [name, mine, want] : {std::tuple<std::string, Variable, Variable>{"weight", layer->weight(), reference->weight()},
                                         {"bias", layer->bias(), reference->bias()}}) {
    Tensor g = mine.grad().to(kFloat32).contiguous().clone();
    comm->allreduce(g, comm::ReduceOp::kSum);
    expect_close(g, want.grad(), c.tol, name + " gradient summed over the ranks");
  }
  expect_close(layer->running_mean(), reference->running_mean(), c.tol, "running_mean");
  expect_close(layer->running_var(), reference->running_var(), c.tol, "running_var");
  EXPECT_EQ(layer->num_batches_tracked().to_vector<std::int64_t>(), std::vector<std::int64_t>{1});
}

// Over every host communicator of this layout (the sums go through the communicator's allreduce).
TEST_P(SyncBatchNorm, RanksNormaliseAsOneLayerOnTheCombinedBatch) {
  for (const std::string& name : dpl::test::host_communicator_names()) {
    if (name == "pure_nccl") continue;  // host tensors here
    SCOPED_TRACE(name);
    check_against_combined_batch(GetParam(), dpl::test::shared_communicator(name));
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, SyncBatchNorm,
                         ::testing::Values(Case{kFloat32, false, false, 2e-5f}, Case{kFloat32, true, false, 2e-5f},
                                           Case{kFloat32, false, true, 2e-5f}, Case{kBFloat16, false, false, 3e-2f}));

TEST(SyncBatchNormConversion, EvaluationAndOneRankUseTheOrdinaryLayer) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("naive");
  nn::Sequential model{nn::BatchNorm2d{kChannels}, nn::ReLU{}, nn::BatchNorm2d{kChannels}};
  EXPECT_EQ(parallel::convert_sync_batchnorm(model, comm), 2u);
  model.eval();
  Generator gen(3);
  const Tensor x = Tensor::normal({2, kChannels, 3, 3}, 0.f, 1.f, gen);
  nn::Sequential plain{nn::BatchNorm2d{kChannels}, nn::ReLU{}, nn::BatchNorm2d{kChannels}};
  plain.eval();
  // Evaluation normalises with the running statistics: no collective, the same on every rank.
  EXPECT_EQ(model(Variable(x)).data().to_vector<float>(), plain(Variable(x)).data().to_vector<float>());
  EXPECT_EQ(parallel::convert_sync_batchnorm(model, nullptr), 2u);
  model.train();
  plain.train();
  EXPECT_EQ(model(Variable(x)).data().to_vector<float>(), plain(Variable(x)).data().to_vector<float>());
}

}  // namespace
