// BatchNorm2d's batch counter (backend::increment_count) is a plain kernel of every build, not a
// part of the oneDNN or cuDNN batch-norm files: these tests pass in a build without oneDNN too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/kernels.hpp"
#include "dpl/nn/normalization.hpp"
#include "support/expect_error.hpp"

namespace dpl {
namespace {

TEST(BatchNormCounter, IncrementsOnTheCpuInEveryBuild) {
  Tensor counter = Tensor::zeros({1}, kInt64);
  counter.fill_(41);
  backend::increment_count(counter);
  EXPECT_EQ(counter.to_vector<std::int64_t>(), (std::vector<std::int64_t>{42}));
  backend::increment_count(counter);
  EXPECT_EQ(counter.to_vector<std::int64_t>(), (std::vector<std::int64_t>{43}));
}

// The module's own buffer, as BatchNorm2d hands it to the kernel after each training batch.
TEST(BatchNormCounter, IncrementsTheModulesBuffer) {
  nn::BatchNorm2d bn(3);
  Tensor count = bn.num_batches_tracked();
  ASSERT_EQ(count.dtype(), kInt64);
  backend::increment_count(count);
  backend::increment_count(count);
  EXPECT_EQ(bn.num_batches_tracked().to_vector<std::int64_t>(), (std::vector<std::int64_t>{2}));
}

TEST(BatchNormCounter, RefusesAnythingButOneInt64) {
  Tensor floats = Tensor::zeros({1}, kFloat32);
  DPL_EXPECT_ERROR(backend::increment_count(floats), testing::HasSubstr("expected one int64 element, got float32"));
  Tensor two = Tensor::zeros({2}, kInt64);
  DPL_EXPECT_ERROR(backend::increment_count(two), testing::HasSubstr("got int64 of shape (2,)"));
}

}  // namespace
}  // namespace dpl
