// Collectives on GPU buffers (staged through pinned host memory) give what they give on host
// buffers. Skips where there is no GPU; each rank uses GPU intra_rank % count.
#include <gtest/gtest.h>

#include <memory>

#include "dist_test_util.hpp"
#include "dpl/dpl.hpp"

namespace dpl::test {
namespace {

class DeviceBuffers : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
    comm_ = &communicator(GetParam());
    device_ = Device::cuda(cuda::select_device_for_local_rank(comm_->host_rank()));
  }
  // Integer-valued floats: sums are exact, so host and device results must be equal.
  Tensor values(std::int64_t n, int salt) const {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>((i * 7 + salt) % 13);
    return Tensor::from_vector<float>(v, {n});
  }
  comm::Communicator* comm_ = nullptr;
  Device device_;
};

TEST_P(DeviceBuffers, AllreduceBroadcastAllgatherMatchHost) {
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{17}, std::int64_t{1000003}}) {
    Tensor host = values(n, comm_->rank());
    Tensor dev = host.to(device_);
    dev.fill_(-1.0);  // poison, then copy the real values in: nothing stale can pass
    dev.copy_(host);
    comm_->allreduce(host, comm::ReduceOp::kSum);
    comm_->allreduce(dev, comm::ReduceOp::kSum);
    EXPECT_EQ(dev.to_vector<float>(), host.to_vector<float>()) << "allreduce n=" << n;

    Tensor hb = values(n, comm_->rank() + 3), db = hb.to(device_);
    const int root = comm_->size() - 1;
    comm_->broadcast(hb, root);
    comm_->broadcast(db, root);
    EXPECT_EQ(db.to_vector<float>(), hb.to_vector<float>()) << "broadcast n=" << n;

    Tensor send = values(n, comm_->rank() + 5);
    Tensor hr = Tensor::empty({n * comm_->size()}), dr = Tensor::full({n * comm_->size()}, -1.0, device_);
    comm_->allgather(send, hr);
    comm_->allgather(send.to(device_), dr);
    EXPECT_EQ(dr.to_vector<float>(), hr.to_vector<float>()) << "allgather n=" << n;
  }
}

TEST_P(DeviceBuffers, AllreduceGradOfAModelOnTheGpu) {
  nn::MLP model(16, 8, 4);
  model.to(device_);
  Tensor grads = model.arena().grads();
  grads.fill_(static_cast<double>(comm_->rank() + 1));
  parallel::allreduce_gradients(model, *comm_);
  const auto g = model.arena().grads().to_vector<float>();
  const float want = (comm_->size() + 1) / 2.f;
  for (float x : g) ASSERT_FLOAT_EQ(x, want);
  // naive always stages device buffers through host memory and reports the copies; the other
  // names may run NCCL on the device instead (builds with NCCL).
  if (GetParam() == "naive") {
    bool has_d2h = false;
    for (const auto& p : comm_->last_phases()) has_d2h |= p.name == "d2h";
    EXPECT_TRUE(has_d2h) << "the staged path reports its copies as sub-phases";
  }
}

INSTANTIATE_TEST_SUITE_P(Communicators, DeviceBuffers, ::testing::Values("naive", "hierarchical"));

}  // namespace
}  // namespace dpl::test
