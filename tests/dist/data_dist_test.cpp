// scatter_dataset and evaluate under mpiexec: shards are disjoint up to the documented padding,
// cover the data set and have equal lengths; evaluation over uneven shards equals one process's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "data/scatter_detail.hpp"
#include "dist_test_util.hpp"
#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/train.hpp"

namespace {
using namespace dpl;
using namespace dpl::data;

// Sample i is (i, -i) with label i: every row names its origin.
Dataset id_dataset(std::int64_t n) {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (std::int64_t i = 0; i < n; ++i) {
    x.insert(x.end(), {static_cast<float>(i), -static_cast<float>(i)});
    y.push_back(static_cast<std::int32_t>(i));
  }
  return Dataset(Tensor::from_vector(x, {n, 2}), Tensor::from_vector(y, {n}));
}

// Every rank's labels, rank-major (requires equal lengths on every rank).
std::vector<std::int32_t> gather_labels(comm::Communicator& comm, const Dataset& shard) {
  Tensor all = Tensor::empty({shard.size() * comm.size()}, kInt32);
  comm.allgather(shard.labels(), all);
  return all.to_vector<std::int32_t>();
}

class DataDist : public ::testing::TestWithParam<std::string> {};

TEST_P(DataDist, ScatterShardsAreEqualDisjointAndCover) {
  comm::Communicator& comm = test::communicator(GetParam());
  const int rank = comm.rank(), size = comm.size();
  for (std::int64_t n : {std::int64_t{103}, std::int64_t{96}, std::int64_t{size > 1 ? size - 1 : 1}}) {
    const Dataset full = rank == 0 ? id_dataset(n) : Dataset();
    const Dataset shard = scatter_dataset(full, comm, /*shuffle=*/true, /*seed=*/42);
    const Dataset again = scatter_dataset(full, comm, true, 42);
    const Dataset other = scatter_dataset(full, comm, true, 43);
    const std::vector<std::int32_t> all = gather_labels(comm, shard);
    const std::vector<std::int32_t> all_other = gather_labels(comm, other);

    const std::int64_t m = (n + size - 1) / size;
    EXPECT_EQ(shard.size(), m) << "n=" << n;
    EXPECT_EQ(shard.sample_shape(), (Shape{2}));
    const std::vector<float> x = shard.images().to_vector<float>();
    const std::vector<std::int32_t> y = shard.labels().to_vector<std::int32_t>();
    for (std::size_t i = 0; i < y.size(); ++i) {
      EXPECT_EQ(x[2 * i], static_cast<float>(y[i]));
      EXPECT_EQ(x[2 * i + 1], -static_cast<float>(y[i]));
    }
    EXPECT_EQ(again.labels().to_vector<std::int32_t>(), y);
    if (n > 20) {
      EXPECT_NE(all_other, all);  // tiny sets may draw the same order
    }

    // The unique part of each rank's shard: together exactly 0..n-1, each once.
    std::vector<int> seen(static_cast<std::size_t>(n), 0);
    std::int64_t padding = 0;
    for (int r = 0; r < size; ++r) {
      const Shard s = shard_of(n, size, r);
      for (std::int64_t k = 0; k < s.length; ++k) {
        const std::int32_t id = all[static_cast<std::size_t>(r * m + k)];
        ASSERT_GE(id, 0);
        ASSERT_LT(id, n);
        if (k < s.unique) {
          ++seen[static_cast<std::size_t>(id)];
        } else {
          ++padding;
        }
      }
    }
    for (int c : seen) EXPECT_EQ(c, 1) << "n=" << n;
    EXPECT_EQ(padding, m * size - n);
  }
}

TEST_P(DataDist, ScatterWithoutShuffleOrPaddingKeepsBlocks) {
  comm::Communicator& comm = test::communicator(GetParam());
  const int rank = comm.rank(), size = comm.size();
  const std::int64_t n = 10 * size + (size > 1 ? size - 1 : 0);
  const Dataset full = rank == 0 ? id_dataset(n) : Dataset();
  const Dataset shard = scatter_dataset(full, comm, /*shuffle=*/false, 0, /*force_equal_length=*/false);
  const Shard s = shard_of(n, size, rank, false);
  std::vector<std::int32_t> expected(static_cast<std::size_t>(s.length));
  for (std::int64_t k = 0; k < s.length; ++k) expected[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(s.begin + k);
  EXPECT_EQ(shard.labels().to_vector<std::int32_t>(), expected);
}

TEST_P(DataDist, ScatterInManySmallMessagesGivesTheSameShards) {
  comm::Communicator& comm = test::communicator(GetParam());
  const Dataset full = comm.rank() == 0 ? id_dataset(103) : Dataset();
  const Dataset whole = scatter_dataset(full, comm, true, 11);
  const std::size_t saved = data::detail::scatter_message_bytes();
  data::detail::scatter_message_bytes() = 3 * 2 * sizeof(float);  // three samples per message
  const Dataset pieces = scatter_dataset(full, comm, true, 11);
  data::detail::scatter_message_bytes() = 1;  // below one sample: still one sample per message
  const Dataset single = scatter_dataset(full, comm, true, 11);
  data::detail::scatter_message_bytes() = saved;
  EXPECT_EQ(pieces.labels().to_vector<std::int32_t>(), whole.labels().to_vector<std::int32_t>());
  EXPECT_EQ(pieces.images().to_vector<float>(), whole.images().to_vector<float>());
  EXPECT_EQ(single.images().to_vector<float>(), whole.images().to_vector<float>());
}

TEST_P(DataDist, ScatterFashionMnist) {
  comm::Communicator& comm = test::communicator(GetParam());
  const std::string dir = kDefaultMnistDir;
  // The same host for every rank, so every rank skips or none does.
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz") &&
      !std::filesystem::exists(dir + "/train-images-idx3-ubyte")) {
    GTEST_SKIP() << dir << " is absent (Debian package dataset-fashion-mnist)";
  }
  const int rank = comm.rank(), size = comm.size();
  const Dataset full = rank == 0 ? load_mnist(dir, "train") : Dataset();
  const Dataset shard = scatter_dataset(full, comm, true, 1);
  // Per-class counts of the unique part of every shard add up to Fashion-MNIST's 6000 per class.
  const Shard s = shard_of(60000, size, rank);
  Tensor counts = Tensor::zeros({10}, kInt32);
  const std::vector<std::int32_t> y = shard.labels().to_vector<std::int32_t>();
  for (std::int64_t k = 0; k < s.unique; ++k) {
    const std::int32_t c = y[static_cast<std::size_t>(k)];
    counts.set<std::int32_t>({c}, counts.at<std::int32_t>({c}) + 1);
  }
  comm.allreduce(counts);
  EXPECT_EQ(shard.size(), (60000 + size - 1) / size);
  EXPECT_EQ(shard.images().shape(), (Shape{shard.size(), 784}));
  EXPECT_EQ(counts.to_vector<std::int32_t>(), std::vector<std::int32_t>(10, 6000));
}

TEST_P(DataDist, ScatterOfAnEmptyDataSetFailsOnEveryRank) {
  comm::Communicator& comm = test::communicator(GetParam());
  EXPECT_THROW(scatter_dataset(Dataset(), comm), dpl::Error);
}

TEST_P(DataDist, EvaluateOverUnevenShardsEqualsOneProcess) {
  comm::Communicator& comm = test::communicator(GetParam());
  const int size = comm.size();
  // Every rank builds the same data and model; rank 0's copy is the one scattered.
  for (std::int64_t n : {std::int64_t{101}, std::int64_t{size > 1 ? size - 1 : 1}}) {
    Generator gen(5);
    Tensor x = Tensor::normal({n, 8}, 0.f, 1.f, gen);
    Tensor y = Tensor::empty({n}, kInt32);
    for (std::int64_t i = 0; i < n; ++i) y.set<std::int32_t>({i}, static_cast<std::int32_t>(gen.below(4)));
    const Dataset full(x, y);
    Generator model_gen(7);
    nn::MLP model(16, 8, 4, model_gen);

    const Dataset shard = scatter_dataset(full, comm, /*shuffle=*/true, 3, /*force_equal_length=*/false);
    const train::EvalResult dist = train::evaluate(model, shard, 7, &comm);
    const train::EvalResult single = train::evaluate(model, full, 7, nullptr);

    // Every rank must hold the bit-identical result.
    Tensor mine = Tensor::empty({2}, kInt64);
    std::memcpy(mine.data<std::int64_t>(), &dist.loss, sizeof(double));
    std::memcpy(mine.data<std::int64_t>() + 1, &dist.accuracy, sizeof(double));
    Tensor all = Tensor::empty({2 * size}, kInt64);
    comm.allgather(mine, all);
    const std::vector<std::int64_t> bits = all.to_vector<std::int64_t>();

    EXPECT_EQ(dist.samples, n);
    EXPECT_NEAR(dist.loss, single.loss, 1e-5 * std::abs(single.loss)) << "n=" << n;
    EXPECT_DOUBLE_EQ(dist.accuracy, single.accuracy) << "n=" << n;
    for (int r = 1; r < size; ++r) {
      EXPECT_EQ(bits[2 * r], bits[0]);
      EXPECT_EQ(bits[2 * r + 1], bits[1]);
    }
    EXPECT_TRUE(model.is_training());
  }
}

INSTANTIATE_TEST_SUITE_P(Communicators, DataDist, ::testing::Values("naive", "hierarchical"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
