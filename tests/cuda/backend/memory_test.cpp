// The caching allocator (reuse without driver calls, statistics), pinned host memory, copies
// between devices, and device selection.
#include <cstdlib>

#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class MemoryTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    (void)Tensor::empty({1}, gpu());  // creates the device's backend, so the stats are live
  }
  static cuda::MemoryStats stats() { return cuda::memory_stats(0); }
};

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST_F(MemoryTest, FreedBlockIsReusedWithoutDriverAllocation) {
  if (!cuda::caching_enabled()) GTEST_SKIP() << "DPL_CUDA_NO_CACHING is set";
  const auto before = stats();
  {
    Tensor t = Tensor::empty({std::int64_t{3 << 18}}, gpu());  // 3 MiB of float32
    const auto during = stats();
    EXPECT_EQ(during.current, before.current + 3 * kMiB);
    EXPECT_EQ(during.allocations, before.allocations + 1);
  }
  const auto freed = stats();
  EXPECT_EQ(freed.current, before.current);
  EXPECT_GE(freed.cached, 3u * kMiB);
  {
    Tensor again = Tensor::empty({std::int64_t{3 << 18}}, gpu());
    Tensor smaller = Tensor::empty({1000}, gpu());
    EXPECT_EQ(stats().driver_allocs, freed.driver_allocs) << "a freed size must come from the cache";
    (void)smaller;
  }
  EXPECT_EQ(stats().reserved, stats().current + stats().cached);
}

TEST_F(MemoryTest, SmallTensorsShareSegments) {
  if (!cuda::caching_enabled()) GTEST_SKIP() << "DPL_CUDA_NO_CACHING is set";
  const auto before = stats();
  std::vector<Tensor> many;
  for (int i = 0; i < 100; ++i) many.push_back(Tensor::empty({256}, gpu()));  // 1 KiB each
  EXPECT_LE(stats().driver_allocs, before.driver_allocs + 1);
}

TEST_F(MemoryTest, CurrentAndPeak) {
  cuda::reset_peak(0);
  const auto base = stats();
  EXPECT_EQ(base.peak, base.current);
  {
    Tensor a = Tensor::empty({std::int64_t{2 << 20}}, gpu());  // 8 MiB
    Tensor b = Tensor::empty({std::int64_t{1 << 20}}, gpu());  // 4 MiB
    const auto s = stats();
    EXPECT_EQ(s.current, base.current + 12 * kMiB);
    EXPECT_EQ(s.peak, s.current);
  }
  const auto after = stats();
  EXPECT_EQ(after.current, base.current);
  EXPECT_EQ(after.peak, base.current + 12 * kMiB);
  cuda::reset_peak(0);
  EXPECT_EQ(stats().peak, base.current);
}

TEST_F(MemoryTest, EmptyCacheReturnsFreeSegments) {
  { Tensor big = Tensor::empty({std::int64_t{16 << 20}}, gpu()); }
  cuda::empty_cache(0);
  const auto s = stats();
  EXPECT_EQ(s.reserved, s.current + s.cached);
  EXPECT_LT(s.cached, 64u * kMiB);
}

TEST_F(MemoryTest, TrainingLoopStopsCallingTheDriver) {
  if (!cuda::caching_enabled()) GTEST_SKIP() << "DPL_CUDA_NO_CACHING is set";
  Generator g(seed_);
  nn::MLP model(256, 784, 10, g);
  model.to(gpu());
  optim::Adam opt;
  opt.setup(model);
  const Variable x(on_gpu(rand({64, 784})));
  const Tensor y = on_gpu(labels(64, 10));
  auto step = [&] { opt.update([&] { return softmax_cross_entropy(model(x), y); }); };
  step();
  step();
  const auto warm = stats();
  for (int i = 0; i < 20; ++i) step();
  cuda::synchronize(0);
  const auto after = stats();
  EXPECT_EQ(after.driver_allocs, warm.driver_allocs) << "the hot path called cudaMalloc";
  EXPECT_GT(after.allocations, warm.allocations);
  EXPECT_EQ(after.current, warm.current) << "the step leaks device memory";
}

TEST_F(MemoryTest, AvailableMemoryCountsTheCacheAsAvailable) {
  if (!cuda::caching_enabled()) GTEST_SKIP() << "DPL_CUDA_NO_CACHING is set";
  const std::size_t before = cuda::available_memory(0);
  EXPECT_GT(before, 64 * kMiB);
  {
    Tensor t = Tensor::empty({std::int64_t{16 << 18}}, gpu());  // 16 MiB of float32
    // Other processes may allocate meanwhile: only a bound is certain.
    EXPECT_LE(cuda::available_memory(0), before);
  }
  // The freed block stays in dpl's cache, which a new allocation can still get.
  EXPECT_GE(stats().cached, 16 * kMiB);
  EXPECT_GE(cuda::available_memory(0) + 4 * kMiB, before);
}

TEST_F(MemoryTest, ZeroSizedTensors) {
  Tensor z = Tensor::empty({0, 5}, gpu());
  EXPECT_EQ(z.numel(), 0);
  EXPECT_EQ(z.to(Device::cpu()).numel(), 0);
  z.fill_(1.0);
}

TEST_F(MemoryTest, PinnedMemoryIsCachedAndCopiesAsynchronously) {
  const auto before = cuda::pinned_stats();
  constexpr std::int64_t n = 10000;
  void* p = cuda::pinned_allocate(n * sizeof(float));
  auto storage = std::make_shared<Storage>(p, n * sizeof(float), Device::cpu(), [](void* q) { cuda::pinned_free(q); });
  Tensor host(storage, 0, {n}, {1}, kFloat32);
  const Tensor values = rand({n});
  host.copy_(values);
  const Tensor dev = host.to(gpu());
  expect_equal<float>(dev, values, "copy from pinned memory");
  const auto during = cuda::pinned_stats();
  EXPECT_EQ(during.current, before.current + 40960u);  // rounded up to whole pages
  host = Tensor();
  storage.reset();  // frees the block while the copy may still be queued
  cuda::synchronize(0);
  void* q = cuda::pinned_allocate(n * sizeof(float));
  EXPECT_EQ(cuda::pinned_stats().driver_allocs, during.driver_allocs) << "the freed pinned block was not reused";
  cuda::pinned_free(q);
}

TEST_F(MemoryTest, CopiesBetweenGpus) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  const Tensor x = rand({1000, 17});
  const Tensor a = x.to(Device::cuda(0));
  const Tensor b = a.to(Device::cuda(1));
  EXPECT_EQ(b.device(), Device::cuda(1));
  expect_equal<float>(b, x, "cuda:0 -> cuda:1");
  expect_equal<float>(b.to(Device::cuda(0)), x, "cuda:1 -> cuda:0");
}

// --- device selection -------------------------------------------------------------------------

class DeviceTest : public CudaTest {
 protected:
  void TearDown() override {
    unsetenv("DPL_CUDA_DEVICE");
    if (cuda_device_count() > 0) cuda::set_device(0);
    CudaTest::TearDown();
  }
};

TEST_F(DeviceTest, SelectByLocalRank) {
  const int n = cuda_device_count();
  for (int r = 0; r < 2 * n + 1; ++r) {
    EXPECT_EQ(cuda::select_device_for_local_rank(r), r % n);
    EXPECT_EQ(cuda::current_device(), r % n);
  }
  EXPECT_THROW(cuda::select_device_for_local_rank(-1), Error);
}

TEST_F(DeviceTest, SelectHonoursTheEnvironment) {
  const int n = cuda_device_count();
  setenv("DPL_CUDA_DEVICE", std::to_string(n - 1).c_str(), 1);
  EXPECT_EQ(cuda::select_device_for_local_rank(0), n - 1);
  EXPECT_EQ(cuda::select_device_for_local_rank(5), n - 1);
  setenv("DPL_CUDA_DEVICE", ("0," + std::to_string(n - 1)).c_str(), 1);
  EXPECT_EQ(cuda::select_device_for_local_rank(0), 0);
  EXPECT_EQ(cuda::select_device_for_local_rank(1), n - 1);
  EXPECT_EQ(cuda::select_device_for_local_rank(2), 0);
  setenv("DPL_CUDA_DEVICE", "gpu0", 1);
  EXPECT_THROW(cuda::select_device_for_local_rank(0), Error);
  setenv("DPL_CUDA_DEVICE", std::to_string(n).c_str(), 1);
  EXPECT_THROW(cuda::select_device_for_local_rank(0), Error);
}

TEST_F(DeviceTest, MissingDevicesFailClearly) {
  const int n = cuda_device_count();
  EXPECT_THROW(cuda::set_device(n), Error);
  EXPECT_THROW(cuda::memory_stats(n), Error);
  EXPECT_THROW(cuda::synchronize(-1), Error);
  EXPECT_THROW(Tensor::empty({4}, Device::cuda(n)), Error);
  cuda::set_device(0);
  EXPECT_EQ(cuda::current_device(), 0);
}

TEST_F(DeviceTest, KernelsUseTheTensorsDeviceNotTheCurrentOne) {
  // Work on cuda:0 while another device is current must still run on cuda:0.
  const int n = cuda_device_count();
  cuda::set_device(n - 1);
  const Tensor x = rand({64});
  Variable v(on_gpu(x));
  const float got = sum(v).item();
  float want = 0.f;
  for (float e : x.to_vector<float>()) want += e;
  EXPECT_NEAR(got, want, 1e-4f);
  EXPECT_EQ(cuda::current_device(), n - 1) << "an op changed the caller's current device";
}

TEST_F(DeviceTest, Tf32IsOffByDefaultAndCanBeToggled) {
  if (std::getenv("DPL_CUDA_TF32") == nullptr) {
    EXPECT_FALSE(cuda::allow_tf32());
  }
  const bool was = cuda::allow_tf32();
  cuda::set_allow_tf32(true);
  EXPECT_TRUE(cuda::allow_tf32());
  const Tensor a = rand({64, 64});
  Tensor c = Tensor::empty({64, 64}, gpu());
  backend::gemm(false, false, 1.f, on_gpu(a), on_gpu(a), 0.f, c);
  Tensor want = Tensor::empty({64, 64});
  backend::gemm(false, false, 1.f, a, a, 0.f, want);
  expect_close(c, want, 1e-2f, 1e-2f, "gemm with TF32");  // TF32 keeps 10 mantissa bits
  cuda::set_allow_tf32(was);
}

}  // namespace
}  // namespace dpl::test
