// The image pipeline's device half: normalize_images on the GPU against the CPU (bit for bit),
// the side-stream copy against a plain copy, and ImageBatchSource's GPU delivery against its host
// delivery, batch for batch, with the epoch counters and the loader's errors where they belong.
#include <gmock/gmock.h>

#include <cstring>
#include <memory>

#include "support/expect_error.hpp"
#include "support/images.hpp"
#include "backend/side_stream_copy.hpp"
#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

using data::normalize_images;
using ::testing::HasSubstr;

class ImagePipelineCuda : public CudaTest {};

Tensor random_bytes(Generator& gen, const Shape& shape) {
  Tensor t = Tensor::empty(shape, kUInt8);
  auto* p = t.data<std::uint8_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<std::uint8_t>(gen.below(256));
  return t;
}

// Raw bytes of a tensor on the host, for exact comparisons of any dtype.
std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.to(Device::cpu()).contiguous();
  const auto* p = static_cast<const std::uint8_t*>(h.raw_data());
  return std::vector<std::uint8_t>(p, p + h.nbytes());
}

TEST_F(ImagePipelineCuda, NormalizeImagesMatchesTheCpuBitForBit) {
  struct Case {
    Shape shape;
    std::vector<float> mean, std;
  };
  const Case cases[] = {
      {{4, 17, 13, 3}, {123.675f, 116.28f, 103.53f}, {58.395f, 57.12f, 57.375f}},
      {{3, 9, 11, 1}, {33.3f}, {78.5f}},
      {{2, 8, 8, 3}, {0.f}, {255.f}},
  };
  for (const Case& k : cases) {
    const Tensor host = random_bytes(gen_, k.shape);
    const Tensor device = on_gpu(host);
    for (DType dt : {kFloat32, kBFloat16, kFloat16})
      for (MemoryFormat f : {MemoryFormat::kChannelsLast, MemoryFormat::kContiguous}) {
        SCOPED_TRACE(::testing::Message() << dt << " shape " << shape_str(k.shape) << " channels-last "
                                          << (f == MemoryFormat::kChannelsLast));
        const Tensor want = normalize_images(host, k.mean, k.std, dt, f);
        const Tensor got = normalize_images(device, k.mean, k.std, dt, f);
        EXPECT_EQ(got.device(), gpu());
        EXPECT_EQ(got.shape(), want.shape());
        EXPECT_EQ(got.strides(), want.strides());
        EXPECT_EQ(bytes_of(got), bytes_of(want));
      }
  }
}

TEST_F(ImagePipelineCuda, UInt8TensorsMoveBetweenHostAndDevice) {
  const Tensor host = random_bytes(gen_, {5, 7, 3});
  const Tensor device = host.to(gpu());
  EXPECT_EQ(device.dtype(), kUInt8);
  EXPECT_TRUE(device.to(gpu()).shares_storage_with(device));
  EXPECT_EQ(device.to_vector<std::uint8_t>(), host.to_vector<std::uint8_t>());
  EXPECT_EQ(device.clone().to_vector<std::uint8_t>(), host.to_vector<std::uint8_t>());
  // One-byte elements through the GPU's strided copy and fill.
  EXPECT_EQ(device.narrow(1, 2, 3).contiguous().to_vector<std::uint8_t>(),
            host.narrow(1, 2, 3).contiguous().to_vector<std::uint8_t>());
  Tensor z = Tensor::zeros({4, 3}, TensorOptions(kUInt8, gpu()));
  z.narrow(1, 1, 1).fill_(200);
  EXPECT_EQ(z.to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{0, 200, 0, 0, 200, 0, 0, 200, 0, 0, 200, 0}));
}

TEST_F(ImagePipelineCuda, SideStreamCopyGivesWhatAPlainCopyGives) {
  const Shape shape{8, 32, 32, 3};
  const Tensor source = random_bytes(gen_, shape);
  // A page-locked host tensor, as the loader's batch buffers are.
  void* pinned = cuda::pinned_allocate(source.nbytes());
  auto storage = std::make_shared<Storage>(pinned, source.nbytes(), Device::cpu(), [](void* p) { cuda::pinned_free(p); });
  Tensor host(storage, 0, shape, contiguous_strides(shape), kUInt8);
  std::memcpy(host.raw_data(), source.raw_data(), source.nbytes());
  const Tensor labels = Tensor::from_vector<std::int32_t>({3, 1, 4, 1, 5, 9, 2, 6}, {8});

  Tensor images = Tensor::empty(shape, TensorOptions(kUInt8, gpu()));
  Tensor device_labels = Tensor::empty({8}, TensorOptions(kInt32, gpu()));
  backend::SideStreamCopy copy(gpu());
  EXPECT_TRUE(copy.active());
  copy.copy(host, images);
  copy.copy(labels, device_labels);
  copy.order_compute_after();
  // Queued on the compute stream after the wait: reads what the copy wrote.
  const Tensor normalised = normalize_images(images, {0.f}, {1.f});
  copy.wait();
  std::memset(host.raw_data(), 0, host.nbytes());  // the host buffer is free once wait() returned

  EXPECT_EQ(images.to_vector<std::uint8_t>(), source.to_vector<std::uint8_t>());
  EXPECT_EQ(bytes_of(normalised), bytes_of(normalize_images(source, {0.f}, {1.f})));
  EXPECT_EQ(device_labels.to_vector<std::int32_t>(), labels.to_vector<std::int32_t>());

  // Moved-from and default groups do nothing; mismatches are named.
  backend::SideStreamCopy moved = std::move(copy);
  EXPECT_FALSE(copy.active());
  EXPECT_TRUE(moved.active());
  Tensor wrong = Tensor::empty({8}, TensorOptions(kInt32, gpu()));
  DPL_EXPECT_ERROR(moved.copy(host, wrong), HasSubstr("expected equal shapes and dtypes"));
  DPL_EXPECT_ERROR(moved.copy(images, images), HasSubstr("expected a host source"));
  DPL_EXPECT_ERROR(backend::SideStreamCopy(Device::cpu()), HasSubstr("expected a GPU to copy to, got cpu"));
}

using Synthetic = SyntheticImages;

data::ImageLoaderOptions loader_options(int prefetch) {
  data::ImageLoaderOptions o;
  o.batch_size = 4;
  o.workers = 2;
  o.prefetch = prefetch;
  o.seed = 7;
  return o;
}

TEST_F(ImagePipelineCuda, DeviceDeliveryGivesTheHostDeliverysBatches) {
  auto ds = std::make_shared<Synthetic>(10);  // 4 + 4 + 2 per epoch
  const std::vector<float> mean = {100.f, 110.f, 120.f}, std = {50.f, 60.f, 70.f};
  for (int prefetch : {1, 2})
    for (DType dt : {kFloat32, kBFloat16})
      for (MemoryFormat f : {MemoryFormat::kChannelsLast, MemoryFormat::kContiguous}) {
        SCOPED_TRACE(::testing::Message() << "prefetch " << prefetch << " " << dt << " channels-last "
                                          << (f == MemoryFormat::kChannelsLast));
        data::ImageDelivery on_host{Device::cpu(), dt, f};
        data::ImageDelivery on_device{gpu(), dt, f};
        data::ImageBatchSource host(
            std::make_unique<data::ImageLoader>(ds, data::ImageTransform::train(8), loader_options(prefetch)), mean,
            std, on_host);
        data::ImageBatchSource device(
            std::make_unique<data::ImageLoader>(ds, data::ImageTransform::train(8), loader_options(prefetch)), mean,
            std, on_device);
        for (int i = 0; i < 7; ++i) {
          const data::Batch h = host.next();
          const data::Batch d = device.next();
          EXPECT_EQ(d.x.device(), gpu());
          EXPECT_EQ(d.y.device(), gpu());
          EXPECT_TRUE(d.x.to(gpu()).shares_storage_with(d.x));  // the updater's copy is a no-op
          EXPECT_EQ(d.x.dtype(), dt);
          EXPECT_EQ(d.x.shape(), h.x.shape());
          EXPECT_EQ(d.x.strides(), h.x.strides());
          EXPECT_EQ(bytes_of(d.x), bytes_of(h.x));
          EXPECT_EQ(d.y.to_vector<std::int32_t>(), h.y.to_vector<std::int32_t>());
          EXPECT_EQ(device.iteration(), host.iteration());
          EXPECT_EQ(device.epoch(), host.epoch());
          EXPECT_EQ(device.is_new_epoch(), host.is_new_epoch());
          EXPECT_DOUBLE_EQ(device.epoch_detail(), host.epoch_detail());
        }
      }
}

TEST_F(ImagePipelineCuda, DeviceDeliveryThrowsAPrefetchedBatchsErrorAtThatBatch) {
  auto ds = std::make_shared<Synthetic>(12, std::vector<std::int64_t>{5});
  data::ImageLoaderOptions o = loader_options(2);
  o.shuffle = false;
  o.batch_size = 3;
  data::ImageBatchSource source(std::make_unique<data::ImageLoader>(ds, data::ImageTransform::validation(8), o), {0.f},
                                {255.f}, data::ImageDelivery{gpu(), kFloat32, MemoryFormat::kChannelsLast});
  EXPECT_EQ(source.next().size(), 3);  // took the broken second batch ahead, without failing
  DPL_EXPECT_ERROR(source.next(), HasSubstr("synthetic.txt:6: example 5 is broken"));
  DPL_EXPECT_ERROR(source.next(), HasSubstr("synthetic.txt:6: example 5 is broken"));
  EXPECT_EQ(source.iteration(), 1);
}

}  // namespace
}  // namespace dpl::test
