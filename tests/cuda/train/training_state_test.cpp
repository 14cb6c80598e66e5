// Weights and optimizer state of a model on the GPU: saved through the host, loaded back into the
// GPU tensors in place, and a GPU run restored half way continues bit-identically.
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "support/temp_dir.hpp"

namespace dpl::test {
namespace {

class TrainingStateCuda : public CudaTest {
 protected:
  void train(nn::Module& model, optim::Optimizer& opt, int steps) {
    for (int i = 0; i < steps; ++i) {
      const std::size_t k = static_cast<std::size_t>(opt.t());
      opt.update([&] { return softmax_cross_entropy(model(Variable(xs_[k])), ys_[k]); });
    }
  }
  void make_batches(int steps) {
    for (int i = 0; i < steps; ++i) {
      xs_.push_back(on_gpu(rand({16, 12})));
      ys_.push_back(on_gpu(labels(16, 5)));
    }
  }
  std::vector<Tensor> xs_, ys_;
};

TEST_F(TrainingStateCuda, WeightsOfAGpuModelLoadInPlaceOnEitherDevice) {
  TempDir dir("dpl_training_state_cuda");
  const std::string path = dir.file("gpu.safetensors");
  Generator g1(seed_), g2(seed_ + 1), g3(seed_ + 2);
  nn::MLP saved(8, 12, 5, g1), on_cpu(8, 12, 5, g2), on_device(8, 12, 5, g3);
  saved.to(gpu());
  on_device.to(gpu());
  serialize::save_weights(saved, path);

  serialize::load_weights(on_cpu, path);
  EXPECT_EQ(on_cpu.arena().params().to_vector<float>(), saved.arena().params().to_vector<float>());

  const std::uint64_t arena_id = on_device.arena().id();
  const void* memory = on_device.named_parameters()[0].second.data().raw_data();
  serialize::load_weights(on_device, path);
  EXPECT_EQ(on_device.arena().id(), arena_id);
  EXPECT_EQ(on_device.named_parameters()[0].second.data().raw_data(), memory);
  EXPECT_EQ(on_device.named_parameters()[0].second.device(), gpu());
  EXPECT_EQ(on_device.arena().params().to_vector<float>(), saved.arena().params().to_vector<float>());
}

TEST_F(TrainingStateCuda, AdamRestoredFromAFileContinuesBitIdentically) {
  make_batches(6);
  TempDir dir("dpl_training_state_cuda");
  Generator g1(seed_), g2(seed_), g3(seed_ + 7);
  nn::MLP uninterrupted(8, 12, 5, g1), first_half(8, 12, 5, g2), resumed(8, 12, 5, g3);
  for (nn::MLP* m : {&uninterrupted, &first_half, &resumed}) m->to(gpu());
  optim::Adam a(0.01f), b(0.01f), c(0.01f);
  a.setup(uninterrupted);
  b.setup(first_half);
  c.setup(resumed);
  train(uninterrupted, a, 6);
  train(first_half, b, 3);

  serialize::save_weights(first_half, dir.file("w.safetensors"));
  serialize::save_safetensors(dir.file("adam.safetensors"), b.state());
  serialize::load_weights(resumed, dir.file("w.safetensors"));
  c.load_state(serialize::load_safetensors(dir.file("adam.safetensors")).tensors, b.state_scalars());
  EXPECT_EQ(c.state()[0].second.device(), gpu());
  train(resumed, c, 3);

  EXPECT_EQ(resumed.arena().params().to_vector<float>(), uninterrupted.arena().params().to_vector<float>());
  EXPECT_EQ(c.state()[0].second.to_vector<float>(), a.state()[0].second.to_vector<float>());
  EXPECT_EQ(c.state()[1].second.to_vector<float>(), a.state()[1].second.to_vector<float>());
}

}  // namespace
}  // namespace dpl::test
