// SideLane (src/backend/side_lane.hpp): while a thread is inside a Scope its device work goes to
// the lane's stream and its allocations to the lane's pool; a shared block it frees is held until
// join(); what must stay on the compute stream refuses; times come back for each item.
#include <gtest/gtest.h>

#include "backend/cuda/cuda_device.hpp"
#include "backend/side_lane.hpp"
#include "cuda_test_util.hpp"
#include "support/expect_error.hpp"

namespace dpl::test {
namespace {

class SideLaneTest : public CudaTest {};

TEST_F(SideLaneTest, InsideAScopeTheThreadsWorkGoesToTheLane) {
  backend::CudaDevice& d = backend::CudaDevice::get(0);
  const auto compute = d.compute_stream();
  backend::SideLane lane(0);
  lane.prepare(1);
  lane.mark_ready(0);
  EXPECT_EQ(backend::cuda_stream(0), compute);
  {
    backend::SideLane::Scope scope(lane);
    EXPECT_NE(backend::cuda_stream(0), compute);
    EXPECT_TRUE(d.routed_here());
    lane.begin_item(0);
    const Tensor x = Tensor::full({1000}, 2.0, TensorOptions(kFloat32, gpu()));
    Tensor y = x.clone();  // fill and copy queued on the lane's stream
    y.fill_(6.0);
    // cuBLAS is bound to the compute stream: refused rather than run out of order.
    DPL_EXPECT_ERROR(static_cast<void>(d.cublas()), ::testing::HasSubstr("routed to a side stream"));
    lane.end_item(0);
    lane.mark_backward_end();
    lane.join();
    EXPECT_EQ(y.to_vector<float>(), std::vector<float>(1000, 6.f));
  }
  EXPECT_EQ(backend::cuda_stream(0), compute);
  EXPECT_FALSE(d.routed_here());
  const backend::SideLane::Times t = lane.times(1);
  ASSERT_EQ(t.seconds.size(), 1u);
  EXPECT_GE(t.seconds[0], 0.0);
  EXPECT_LE(t.start[0], 0.0);  // relative to the lane's end
}

TEST_F(SideLaneTest, ASharedBlockFreedOnTheLaneIsHeldUntilTheJoin) {
  if (!cuda::caching_enabled()) GTEST_SKIP() << "DPL_CUDA_NO_CACHING: every free waits for the device";
  backend::SideLane lane(0);
  lane.prepare(1);
  const std::size_t without = cuda::memory_stats(0).current;
  Tensor shared = Tensor::zeros({1 << 20}, TensorOptions(kFloat32, gpu()));  // 4 MiB of the shared cache
  const std::size_t before = cuda::memory_stats(0).current;
  ASSERT_GT(before, without);
  {
    backend::SideLane::Scope scope(lane);
    shared = Tensor();  // the lane's stream could still read it
  }
  // Held: still counted as in use, so the compute stream cannot be handed it.
  EXPECT_EQ(cuda::memory_stats(0).current, before);
  lane.mark_backward_end();
  lane.join();
  EXPECT_EQ(cuda::memory_stats(0).current, without);
}

TEST_F(SideLaneTest, TheLanesAllocationsComeFromItsOwnPool) {
  if (!cuda::caching_enabled()) GTEST_SKIP() << "DPL_CUDA_NO_CACHING: no pools";
  backend::SideLane lane(0);
  lane.prepare(1);
  void* on_lane = nullptr;
  {
    backend::SideLane::Scope scope(lane);
    Tensor t = Tensor::empty({123457}, TensorOptions(kFloat32, gpu()));
    on_lane = t.raw_data();
  }  // freed back to the lane's pool
  // The same request from the compute stream's side never gets the lane's block.
  Tensor t = Tensor::empty({123457}, TensorOptions(kFloat32, gpu()));
  EXPECT_NE(t.raw_data(), on_lane);
  {
    backend::SideLane::Scope scope(lane);
    Tensor again = Tensor::empty({123457}, TensorOptions(kFloat32, gpu()));
    EXPECT_EQ(again.raw_data(), on_lane);  // the lane's own cache serves it
  }
}

TEST_F(SideLaneTest, ScopesDoNotNest) {
  backend::SideLane a(0), b(0);
  backend::SideLane::Scope scope(a);
  DPL_EXPECT_ERROR(static_cast<void>(backend::SideLane::Scope(b)),
                   ::testing::HasSubstr("routed to cuda:0's side stream already"));
}

}  // namespace
}  // namespace dpl::test
