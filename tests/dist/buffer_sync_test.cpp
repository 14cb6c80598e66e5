// Buffers kept equal across ranks (parallel::BufferSync): each rank's BatchNorm statistics
// follow its own batches and drift apart; synchronize_buffers() makes them the ranks' mean (and
// counters rank 0's), kEveryStep does so after each update, and the Trainer before its extensions
// and at the end of a run. Every check reads the buffers back on every rank.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dist_test_util.hpp"
#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"
#include "dpl/train.hpp"

namespace {
using namespace dpl;

constexpr std::int64_t kBatch = 12, kIn = 6, kOut = 3;

std::shared_ptr<nn::Sequential> make_model() {
  Generator gen(5);
  return std::make_shared<nn::Sequential>(nn::Linear(nn::LinearOptions(kIn, 10), gen), nn::BatchNorm1d(10), nn::ReLU(),
                                          nn::Linear(nn::LinearOptions(10, kOut), gen));
}

// This rank's own data: each rank's batches differ, so its running statistics do.
data::Dataset rank_data(int rank) {
  Generator gen(100 + static_cast<std::uint64_t>(rank));
  const std::int64_t n = 4 * kBatch;
  Tensor x = Tensor::normal({n, kIn}, static_cast<float>(rank), 1.f + static_cast<float>(rank), gen);
  Tensor y = Tensor::empty({n}, kInt32);
  for (std::int64_t i = 0; i < n; ++i) y.set<std::int32_t>({i}, static_cast<std::int32_t>(gen.below(kOut)));
  return data::Dataset(x, y);
}

// A buffer's values as doubles (float buffers through float32, counters as they are).
std::vector<double> values(const Tensor& t) {
  const Tensor flat = t.contiguous().reshape({t.numel()});
  if (!is_float_dtype(t.dtype())) {
    const std::vector<std::int64_t> v = flat.to_vector<std::int64_t>();
    return {v.begin(), v.end()};
  }
  const std::vector<float> v = flat.to(kFloat32).to_vector<float>();
  return {v.begin(), v.end()};
}

// Every rank's copy of each buffer (rank-major), gathered on every rank.
std::vector<std::vector<double>> gathered_buffers(nn::Module& model, comm::Communicator& comm) {
  std::vector<std::vector<double>> out;
  for (auto& [name, var] : model.named_buffers()) {
    const Tensor data = var.data();
    const Tensor mine = (is_float_dtype(data.dtype()) ? data.to(kFloat32) : data).contiguous().reshape({data.numel()});
    Tensor all = Tensor::empty({comm.size() * mine.numel()}, mine.dtype());
    comm.allgather(mine, all);
    out.push_back(values(all));
  }
  return out;
}

// Whether every rank holds rank 0's value of every buffer.
bool buffers_equal(nn::Module& model, comm::Communicator& comm) {
  for (const std::vector<double>& all : gathered_buffers(model, comm)) {
    const std::size_t n = all.size() / static_cast<std::size_t>(comm.size());
    for (std::size_t i = n; i < all.size(); ++i)
      if (all[i] != all[i % n]) return false;
  }
  return true;
}

void train_steps(nn::Module& model, optim::Optimizer& opt, int rank, int steps) {
  const data::Dataset set = rank_data(rank);
  for (int s = 0; s < steps; ++s) {
    const Tensor x = set.images().narrow(0, (s % 4) * kBatch, kBatch).contiguous();
    const Tensor y = set.labels().narrow(0, (s % 4) * kBatch, kBatch).contiguous();
    opt.update([&] { return softmax_cross_entropy(model(Variable(x)), y); });
  }
}

TEST(BufferSync, RanksDriftApartAndSynchronizeToTheirMean) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("naive");
  auto model = make_model();
  auto opt = parallel::create_multi_node_optimizer(std::make_unique<optim::SGD>(0.05f), comm);
  opt->set_buffer_sync(parallel::BufferSync::kOff);
  opt->setup(*model);
  train_steps(*model, *opt, comm->rank(), 5);
  if (comm->size() > 1) {
    EXPECT_FALSE(buffers_equal(*model, *comm)) << "the ranks' statistics should have drifted";
  }

  // The expected result: the mean of every rank's float buffers; rank 0's counters.
  const std::vector<std::vector<double>> before = gathered_buffers(*model, *comm);
  opt->synchronize_buffers();
  EXPECT_TRUE(buffers_equal(*model, *comm));
  const auto names = model->named_buffers();
  for (std::size_t b = 0; b < names.size(); ++b) {
    const std::vector<double> now = values(names[b].second.data());
    const std::size_t n = now.size();
    const bool is_float = is_float_dtype(names[b].second.data().dtype());
    for (std::size_t i = 0; i < n; ++i) {
      double want = before[b][i];
      if (is_float) {
        want = 0.0;
        for (int r = 0; r < comm->size(); ++r) want += before[b][static_cast<std::size_t>(r) * n + i];
        want /= comm->size();
      }
      EXPECT_NEAR(now[i], want, 1e-5 * (1.0 + std::abs(want))) << names[b].first << "[" << i << "]";
    }
  }
  EXPECT_EQ(names.back().first, "1.num_batches_tracked");
  EXPECT_EQ(names.back().second.data().to_vector<std::int64_t>().at(0), 5);
}

TEST(BufferSync, EveryStepKeepsThemEqualAfterEachUpdateAndTimesIt) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("naive");
  auto model = make_model();
  auto opt = parallel::create_multi_node_optimizer(std::make_unique<optim::SGD>(0.05f), comm);
  opt->set_buffer_sync(parallel::BufferSync::kEveryStep);
  opt->setup(*model);
  for (int s = 0; s < 3; ++s) {
    train_steps(*model, *opt, comm->rank() + s, 1);
    EXPECT_TRUE(buffers_equal(*model, *comm)) << "after update " << s;
  }
  const profile::PhaseSeries* phase = opt->timer().find("buffers");
  if (comm->size() > 1) {
    ASSERT_NE(phase, nullptr);
    EXPECT_EQ(phase->samples.size(), 3u);
  } else {
    EXPECT_EQ(phase, nullptr);  // one rank: nothing to make equal
  }
}

// An extension that, each time it runs, records whether every rank's buffers are equal.
class BufferProbe : public train::Extension {
 public:
  BufferProbe(nn::Module& model, comm::Communicator& comm) : model_(model), comm_(comm) {}
  std::string name() const override { return "buffer_probe"; }
  void operator()(train::Trainer&) override { seen_.push_back(buffers_equal(model_, comm_)); }
  const std::vector<bool>& seen() const { return seen_; }

 private:
  nn::Module& model_;
  comm::Communicator& comm_;
  std::vector<bool> seen_;
};

std::vector<bool> run_trainer(parallel::BufferSync when, bool* equal_at_end) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("naive");
  auto model = make_model();
  auto opt = parallel::create_multi_node_optimizer(std::make_unique<optim::SGD>(0.05f), comm);
  opt->set_buffer_sync(when);
  opt->setup(*model);
  data::BatchIterator batches(rank_data(comm->rank()), kBatch, true, static_cast<std::uint64_t>(comm->rank()));
  train::StandardUpdater updater(batches, *opt, [&](const data::Batch& b, train::Observation&) {
    return softmax_cross_entropy((*model)(Variable(b.x)), b.y);
  });
  train::Trainer trainer(updater, train::TrainerOptions(10, train::LengthUnit::kIteration).communicator(comm).out(""));
  auto probe = std::make_shared<BufferProbe>(*model, *comm);
  trainer.extend(probe, train::Trigger::iterations(4));
  trainer.run();
  *equal_at_end = buffers_equal(*model, *comm);
  return probe->seen();
}

TEST(BufferSync, TheTrainerMakesThemEqualBeforeItsExtensionsAndAtTheEnd) {
  bool at_end = false;
  const std::vector<bool> seen = run_trainer(parallel::BufferSync::kBeforeUse, &at_end);
  EXPECT_EQ(seen, std::vector<bool>({true, true}));  // iterations 4 and 8
  EXPECT_TRUE(at_end);
  if (dpl::test::communicator("naive").size() == 1) return;
  // The same run without synchronisation: what the probe would have seen.
  const std::vector<bool> unsynced = run_trainer(parallel::BufferSync::kOff, &at_end);
  EXPECT_EQ(unsynced, std::vector<bool>({false, false}));
  EXPECT_FALSE(at_end);
}

}  // namespace
