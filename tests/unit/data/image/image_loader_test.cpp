// The threaded image batch loader: coverage of every epoch, shuffling, reproducibility across
// worker counts, errors from workers, skipping bad examples, and shutdown while workers are busy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "dpl/data.hpp"
#include "support/expect_error.hpp"
#include "support/images.hpp"
#include "support/temp_dir.hpp"

namespace {
using namespace dpl;
using namespace dpl::data;
using ::testing::AllOf;
using ::testing::HasSubstr;

using Synthetic = test::SyntheticImages;

ImageLoaderOptions options(std::int64_t batch, int workers, int prefetch = 2) {
  ImageLoaderOptions o;
  o.batch_size = batch;
  o.workers = workers;
  o.prefetch = prefetch;
  o.seed = 42;
  return o;
}

// In order, skipping failed examples; keep_size replaces them instead of leaving them out.
ImageLoaderOptions skipping(std::int64_t batch, int workers, bool keep_size) {
  ImageLoaderOptions o = options(batch, workers);
  o.shuffle = false;
  o.skip_bad = true;
  o.keep_batch_size = keep_size;
  return o;
}

std::vector<std::int32_t> labels_of(const ImageBatch& b) { return b.labels().to_vector<std::int32_t>(); }

TEST(ImageLoader, EveryEpochServesEachIndexOnceInANewOrder) {
  auto ds = std::make_shared<Synthetic>(100);
  // A rank's shard: every third example.
  std::vector<std::int64_t> shard;
  for (std::int64_t i = 1; i < 100; i += 3) shard.push_back(i);  // 33 indices
  ImageLoader loader(ds, shard, ImageTransform::train(8), options(7, 3));
  ASSERT_EQ(loader.batches_per_epoch(), 5);  // 7+7+7+7+5

  std::vector<std::vector<std::int32_t>> orders;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::int32_t> seen;
    for (std::int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
      const ImageBatch batch = loader.next();
      EXPECT_EQ(batch.epoch(), epoch);
      EXPECT_EQ(batch.index_in_epoch(), b);
      EXPECT_EQ(batch.size(), b < 4 ? 7 : 5);
      EXPECT_EQ(batch.height(), 8);
      EXPECT_EQ(batch.width(), 8);
      EXPECT_EQ(batch.channels(), 3);
      EXPECT_EQ(batch.image_bytes(), static_cast<std::size_t>(batch.size()) * 8 * 8 * 3);
      EXPECT_EQ(loader.is_new_epoch(), b == 4);
      for (std::int32_t l : labels_of(batch)) seen.push_back(l);
    }
    EXPECT_EQ(loader.epoch(), epoch);
    orders.push_back(seen);
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(std::vector<std::int64_t>(seen.begin(), seen.end()), shard) << "epoch " << epoch;
  }
  EXPECT_NE(orders[0], orders[1]) << "shuffle draws a new order each epoch";
  EXPECT_NE(orders[1], orders[2]);
  EXPECT_EQ(loader.iteration(), 15);

  // Without shuffling, the shard's own order; drop_last leaves out the short batch.
  ImageLoaderOptions plain = options(7, 2);
  plain.shuffle = false;
  plain.drop_last = true;
  ImageLoader in_order(ds, shard, ImageTransform::validation(8), plain);
  EXPECT_EQ(in_order.batches_per_epoch(), 4);
  EXPECT_EQ(labels_of(in_order.next()), (std::vector<std::int32_t>{1, 4, 7, 10, 13, 16, 19}));
}

TEST(ImageLoader, BatchesAreTheSameWhateverTheNumberOfWorkers) {
  auto ds = std::make_shared<Synthetic>(40);
  auto run = [&](int workers) {
    ImageLoader loader(ds, ImageTransform::train(8), options(6, workers, 3));
    std::vector<std::uint8_t> bytes;
    std::vector<std::int32_t> labels;
    for (std::int64_t b = 0; b < 2 * loader.batches_per_epoch(); ++b) {
      const ImageBatch batch = loader.next();
      bytes.insert(bytes.end(), batch.images(), batch.images() + batch.image_bytes());
      for (std::int32_t l : labels_of(batch)) labels.push_back(l);
    }
    return std::make_pair(bytes, labels);
  };
  const auto one = run(1);
  const auto three = run(3);
  ASSERT_EQ(one.second.size(), 80u);
  EXPECT_EQ(one.second, three.second);
  EXPECT_TRUE(one.first == three.first) << "the pixels differ between 1 and 3 workers";
}

// A global batch split among p processes (ImageLoaderOptions::rank, world_size): the ranks'
// shares, in rank order, are the batches of one process with the whole global batch, pixels
// included; restart_at continues at a batch on another number of processes with the same bytes.
TEST(ImageLoader, SplitGlobalBatchesMatchOneProcessAndRestartOnAnotherCount) {
  auto ds = std::make_shared<Synthetic>(100);
  constexpr std::int64_t kGlobal = 12;
  const auto make = [&](int rank, int world) {
    ImageLoaderOptions o = options(kGlobal / world, 2);
    o.drop_last = true;
    o.rank = rank;
    o.world_size = world;
    return std::make_unique<ImageLoader>(ds, ImageTransform::train(8), o);
  };
  // A global step: every rank's labels and pixels, in rank order.
  const auto step = [](std::vector<std::unique_ptr<ImageLoader>>& ranks) {
    std::pair<std::vector<std::int32_t>, std::vector<std::uint8_t>> out;
    for (auto& l : ranks) {
      const ImageBatch b = l->next();
      for (std::int32_t v : labels_of(b)) out.first.push_back(v);
      out.second.insert(out.second.end(), b.images(), b.images() + b.image_bytes());
    }
    return out;
  };
  const auto job = [&](int world) {
    std::vector<std::unique_ptr<ImageLoader>> ranks;
    for (int r = 0; r < world; ++r) ranks.push_back(make(r, world));
    return ranks;
  };
  auto one = job(1), four = job(4);
  EXPECT_EQ(four[3]->batches_per_epoch(), 8);  // floor(100 / 12), as on one process
  std::vector<decltype(step(one))> expected;
  for (int k = 0; k < 19; ++k) {
    expected.push_back(step(one));
    if (k < 10) {
      EXPECT_TRUE(step(four) == expected.back()) << "step " << k;
    }
  }
  // Four processes stopped after 10 steps (in the second epoch); 2 and 3 take over from there.
  for (int q : {2, 3}) {
    auto resumed = job(q);
    for (auto& l : resumed) l->restart_at(10);
    EXPECT_EQ(resumed[0]->iteration(), 10);
    EXPECT_EQ(resumed[0]->epoch(), 1);
    for (int k = 10; k < 19; ++k)
      EXPECT_TRUE(step(resumed) == expected[static_cast<std::size_t>(k)]) << q << " processes, step " << k;
  }

  // A held batch cannot be restarted under, and a split without drop_last is refused.
  auto held = make(0, 2);
  const ImageBatch b = held->next();
  DPL_EXPECT_ERROR(held->restart_at(0), HasSubstr("is still held by the caller"));
  ImageLoaderOptions no_drop = options(6, 1);
  no_drop.world_size = 2;
  DPL_EXPECT_ERROR(ImageLoader(ds, ImageTransform::train(8), no_drop), HasSubstr("requires drop_last"));
}

TEST(ImageLoader, NormalizedBatchMatchesTheReference) {
  auto ds = std::make_shared<Synthetic>(5);
  ImageLoader loader(ds, ImageTransform::validation(4), options(5, 2));
  const ImageBatch b = loader.next();
  const Tensor f = b.to_float({100, 110, 120}, {50, 60, 70});
  EXPECT_EQ(f.shape(), (Shape{5, 3, 4, 4}));
  EXPECT_FLOAT_EQ(f.at<float>({2, 1, 3, 0}), (b.images()[((2 * 4 + 3) * 4 + 0) * 3 + 1] - 110.0f) / 60.0f);
  EXPECT_EQ(b.pinned(), loader.pinned());
  if (!cuda_is_available()) {
    EXPECT_FALSE(b.pinned());
  }
}

TEST(ImageLoader, WorkerErrorsReachTheCallerAtTheirBatchAndStay) {
  auto ds = std::make_shared<Synthetic>(20, std::vector<std::int64_t>{13});
  ImageLoaderOptions o = options(4, 3);
  o.shuffle = false;
  ImageLoader loader(ds, ImageTransform::validation(8), o);
  // Batches 0..2 hold examples 0..11 and arrive intact.
  for (int b = 0; b < 3; ++b) EXPECT_EQ(loader.next().size(), 4);
  DPL_EXPECT_ERROR(loader.next(), HasSubstr("synthetic.txt:14: example 13 is broken"));
  DPL_EXPECT_ERROR(loader.next(), HasSubstr("synthetic.txt:14: example 13 is broken"));
  EXPECT_EQ(loader.iteration(), 3);
}

TEST(ImageLoader, MissingJpegFileIsReportedWithListAndLine) {
  if (!jpeg_available()) GTEST_SKIP() << "this build has no JPEG codec (libturbojpeg0-dev)";
  test::TempDir dir("dpl_image_loader");
  std::string list;
  for (int i = 0; i < 6; ++i) {
    if (i != 4) test::write_jpeg(dir.file(std::to_string(i) + ".jpg"), test::gradient_image(32, 40, i));
    list += std::to_string(i) + ".jpg " + std::to_string(i) + "\n";
  }
  test::write_text(dir.file("list.txt"), list);
  auto ds = std::make_shared<LabeledImageDataset>(dir.file("list.txt"), dir.path().string());
  ImageLoader loader(ds, ImageTransform::train(16), options(3, 2));
  // Example 4 lies in one of the two batches of the first epoch, whichever the shuffle picked.
  const std::string msg = test::error_message([&] {
    loader.next();
    loader.next();
  });
  EXPECT_THAT(msg, HasSubstr(dir.file("list.txt") + ":5: cannot open " + dir.file("4.jpg") +
                             ": No such file or directory"));

  // With skip_bad the example is left out and counted instead.
  ImageLoaderOptions o = options(3, 2);
  o.skip_bad = true;
  o.shuffle = false;
  ImageLoader skipping(ds, ImageTransform::train(16), o);
  EXPECT_EQ(labels_of(skipping.next()), (std::vector<std::int32_t>{0, 1, 2}));
  const ImageBatch second = skipping.next();
  EXPECT_EQ(labels_of(second), (std::vector<std::int32_t>{3, 5}));
  EXPECT_EQ(second.size(), 2);
  EXPECT_EQ(skipping.skipped(), 1);
}

TEST(ImageLoader, SkippedExamplesAreCompactedOutOfTheirBatch) {
  auto ds = std::make_shared<Synthetic>(8, std::vector<std::int64_t>{3, 5});
  const ImageLoaderOptions o = skipping(4, 2, false);
  ImageLoader loader(ds, ImageTransform::validation(8), o);
  const ImageBatch a = loader.next();
  const ImageBatch b = loader.next();
  EXPECT_EQ(labels_of(a), (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(labels_of(b), (std::vector<std::int32_t>{4, 6, 7}));
  // The pixels moved with their labels: example 6 now sits at position 1.
  std::vector<std::uint8_t> want(8 * 8 * 3);
  transform_example(*ds, 6, ImageTransform::validation(8), o.seed, 0, want.data());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), b.images() + want.size()));
  EXPECT_EQ(loader.skipped(), 2);
}

TEST(ImageLoader, KeepingTheBatchSizeReplacesAFailedExampleByTheNextThatLoaded) {
  auto ds = std::make_shared<Synthetic>(8, std::vector<std::int64_t>{3, 5});
  const ImageLoaderOptions o = skipping(4, 2, true);
  ImageLoader loader(ds, ImageTransform::validation(8), o);
  const ImageBatch a = loader.next();
  const ImageBatch b = loader.next();
  // Example 3, last of its batch, wraps round to example 0; example 5 takes example 6's place.
  EXPECT_EQ(labels_of(a), (std::vector<std::int32_t>{0, 1, 2, 0}));
  EXPECT_EQ(labels_of(b), (std::vector<std::int32_t>{4, 6, 6, 7}));
  std::vector<std::uint8_t> want(8 * 8 * 3);
  transform_example(*ds, 6, ImageTransform::validation(8), o.seed, 0, want.data());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), b.images() + want.size()));
  EXPECT_TRUE(std::equal(want.begin(), want.end(), b.images() + 2 * want.size()));
  EXPECT_EQ(loader.skipped(), 2);
}

TEST(ImageLoader, SkipReportsCountPerEpochAndKeepTheFirstMessagesInBatchOrder) {
  auto ds = std::make_shared<Synthetic>(8, std::vector<std::int64_t>{3, 5});
  const ImageLoaderOptions o = skipping(4, 3, true);
  ImageLoader loader(ds, ImageTransform::validation(8), o);
  EXPECT_EQ(loader.skipped_report().count, 0);
  (void)loader.next();
  // Only the batches returned count, whatever the workers have prepared ahead.
  EXPECT_EQ(loader.skipped_report(0).count, 1);
  (void)loader.next();
  (void)loader.next();  // the first batch of epoch 1
  const SkippedExamples first = loader.skipped_report(0);
  EXPECT_EQ(first.count, 2);
  ASSERT_EQ(first.first.size(), 2u);
  EXPECT_THAT(first.first[0], HasSubstr("synthetic.txt:4: example 3 is broken"));
  EXPECT_THAT(first.first[1], HasSubstr("synthetic.txt:6: example 5 is broken"));
  EXPECT_EQ(loader.skipped_report(1).count, 1);
  EXPECT_EQ(loader.skipped_report(2).count, 0);
  const SkippedExamples run = loader.skipped_report();
  EXPECT_EQ(run.count, 3);
  EXPECT_EQ(run.first.size(), 3u);
  EXPECT_EQ(loader.skipped(), 3);
  // The kept messages stop at kSkipReasonsKept; the count goes on.
  for (int i = 0; i < 8; ++i) (void)loader.next();
  EXPECT_EQ(loader.skipped_report().count, 11);
  EXPECT_EQ(loader.skipped_report().first.size(), ImageLoader::kSkipReasonsKept);
}

TEST(ImageLoader, ABatchWithNoExampleThatLoadedCannotKeepItsSize) {
  auto ds = std::make_shared<Synthetic>(4, std::vector<std::int64_t>{2, 3});
  const ImageLoaderOptions o = skipping(2, 1, true);
  ImageLoader loader(ds, ImageTransform::validation(8), o);
  EXPECT_EQ(loader.next().size(), 2);
  DPL_EXPECT_ERROR(loader.next(), AllOf(HasSubstr("every one of the 2 examples of batch 1 of epoch 0 failed to load"),
                                        HasSubstr("synthetic.txt:3: example 2 is broken")));
  DPL_EXPECT_ERROR(loader.next(), HasSubstr("every one of the 2 examples"));
}

TEST(ImageLoader, HoldingEveryBufferIsAnErrorNotAHang) {
  auto ds = std::make_shared<Synthetic>(20);
  ImageLoader loader(ds, ImageTransform::validation(8), options(2, 2, 2));
  ImageBatch a = loader.next();
  ImageBatch b = loader.next();
  DPL_EXPECT_ERROR(loader.next(), HasSubstr("all 2 batch buffers are held by the caller (batch 0 is still alive)"));
  a.release();
  EXPECT_EQ(a.size(), 0);
  EXPECT_EQ(loader.next().index_in_epoch(), 2);
}

TEST(ImageLoader, DestructsPromptlyWhileWorkersAreBusyAndHeldBatchesSurvive) {
  auto ds = std::make_shared<Synthetic>(400, std::vector<std::int64_t>{}, 5);
  ImageBatch kept;
  const auto t0 = std::chrono::steady_clock::now();
  {
    ImageLoader loader(ds, ImageTransform::train(8), options(16, 4, 3));
    kept = loader.next();
    // Workers are now filling the next batches (16 x 5 ms each, 4 at a time).
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // One batch takes about 20 ms with 4 workers; stopping waits for at most one example per worker,
  // far less than the 400 x 5 ms a full epoch would take.
  EXPECT_LT(seconds, 1.0);
  ASSERT_EQ(kept.size(), 16);
  const std::vector<std::int32_t> l = labels_of(kept);
  EXPECT_TRUE(std::all_of(l.begin(), l.end(), [](std::int32_t v) { return v >= 0 && v < 400; }));
}

TEST(ImageLoader, RefusesBadOptionsByName) {
  auto ds = std::make_shared<Synthetic>(10);
  const ImageTransform t = ImageTransform::validation(8);
  DPL_EXPECT_ERROR(ImageLoader(ds, t, options(0, 1)), HasSubstr("expected batch_size >= 1, got 0"));
  DPL_EXPECT_ERROR(ImageLoader(ds, t, options(2, 0)), HasSubstr("expected workers (-j) >= 1, got 0"));
  DPL_EXPECT_ERROR(ImageLoader(ds, t, options(2, 1, 0)), HasSubstr("expected prefetch >= 1, got 0"));
  DPL_EXPECT_ERROR(ImageLoader(ds, std::vector<std::int64_t>{1, 10}, t, options(2, 1)),
                   HasSubstr("index 10 at position 1 is outside a data set of 10 examples"));
  ImageLoaderOptions o = options(11, 1);
  o.drop_last = true;
  DPL_EXPECT_ERROR(ImageLoader(ds, t, o), HasSubstr("drop_last with 10 indices and batch_size 11 leaves no batch"));
}

TEST(ImageLoader, ServesMnistStyleDataThroughTheAdapter) {
  // Four 2x2 grayscale samples; the validation crop of the whole image at the same size keeps
  // the bytes.
  const std::vector<float> v = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  std::vector<float> scaled;
  for (float x : v) scaled.push_back(x / 255.0f);
  auto ds = std::make_shared<InMemoryImageDataset>(
      Dataset(Tensor::from_vector(scaled, {4, 4}), Tensor::from_vector(std::vector<std::int32_t>{0, 1, 2, 3}, {4})), 2,
      2, 1);
  ImageLoaderOptions o = options(4, 2);
  o.shuffle = false;
  ImageLoader loader(ds, ImageTransform::validation(2, 1.0), o);
  const ImageBatch b = loader.next();
  EXPECT_EQ(b.channels(), 1);
  EXPECT_EQ(std::vector<std::uint8_t>(b.images(), b.images() + b.image_bytes()),
            (std::vector<std::uint8_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
}

TEST(ImageBatchSource, ServesTheLoadersBatchesAsNormalisedFloatWithEpochCounters) {
  auto ds = std::make_shared<Synthetic>(10);
  ImageLoaderOptions o = options(4, 2);  // 4+4+2 per epoch
  const std::vector<float> mean = {100.f, 110.f, 120.f}, std = {50.f, 60.f, 70.f};
  ImageLoader twin(ds, ImageTransform::train(8), o);  // the same seed: the same batches
  ImageBatchSource source(std::make_unique<ImageLoader>(ds, ImageTransform::train(8), o), mean, std);
  ASSERT_EQ(source.batches_per_epoch(), 3);
  EXPECT_EQ(source.iteration(), 0);
  EXPECT_EQ(source.epoch_detail(), 0.0);
  const double details[] = {1.0 / 3, 2.0 / 3, 1.0, 1.0 + 1.0 / 3};
  for (int i = 0; i < 4; ++i) {
    const Batch b = source.next();
    const ImageBatch expected = twin.next();
    ASSERT_EQ(b.x.shape(), (Shape{expected.size(), 3, 8, 8}));
    EXPECT_EQ(b.x.dtype(), kFloat32);
    EXPECT_TRUE(b.x.is_channels_last());
    EXPECT_EQ(b.x.contiguous().to_vector<float>(), expected.to_float(mean, std).contiguous().to_vector<float>());
    EXPECT_EQ(b.y.to_vector<std::int32_t>(), labels_of(expected));
    EXPECT_EQ(source.iteration(), i + 1);
    EXPECT_EQ(source.is_new_epoch(), i == 2);
    EXPECT_EQ(source.epoch(), i >= 2 ? 1 : 0);
    EXPECT_DOUBLE_EQ(source.epoch_detail(), details[i]);
  }
  DPL_EXPECT_ERROR(ImageBatchSource(std::make_unique<ImageLoader>(ds, ImageTransform::train(8), o), mean, {1.f, 0.f, 1.f}),
                   HasSubstr("std"));
  DPL_EXPECT_ERROR(ImageBatchSource(nullptr, mean, std), HasSubstr("expected an image loader, got null"));
}

TEST(ImageBatchSource, PassesTheLoadersErrorOn) {
  auto ds = std::make_shared<Synthetic>(6, std::vector<std::int64_t>{4});
  ImageLoaderOptions o = options(3, 1);
  o.shuffle = false;
  ImageBatchSource source(std::make_unique<ImageLoader>(ds, ImageTransform::validation(8), o), {0.f}, {255.f});
  EXPECT_EQ(source.next().size(), 3);
  DPL_EXPECT_ERROR(source.next(), HasSubstr("synthetic.txt:5: example 4 is broken"));
}

TEST(ImageBatch, ImageTensorViewsTheBufferAndHoldsItLikeTheBatch) {
  auto ds = std::make_shared<Synthetic>(6);
  ImageLoader loader(ds, ImageTransform::validation(8), options(3, 1, /*prefetch=*/1));
  ImageBatch b = loader.next();
  Tensor t = b.image_tensor();
  EXPECT_EQ(t.dtype(), kUInt8);
  EXPECT_EQ(t.shape(), (Shape{3, 8, 8, 3}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.raw_data(), static_cast<const void*>(b.images()));
  const std::vector<std::uint8_t> bytes(b.images(), b.images() + b.image_bytes());
  EXPECT_EQ(t.to_vector<std::uint8_t>(), bytes);
  b.release();
  // The tensor still holds the only buffer.
  DPL_EXPECT_ERROR(loader.next(), HasSubstr("batch buffers are held by the caller"));
  EXPECT_EQ(t.to_vector<std::uint8_t>(), bytes);
  t = Tensor();
  EXPECT_EQ(loader.next().size(), 3);
  DPL_EXPECT_ERROR(ImageBatch().image_tensor(), HasSubstr("the batch is empty"));
}

TEST(ImageBatchSource, DeliversTheModelsDtypeAndLayoutOnTheHost) {
  auto ds = std::make_shared<Synthetic>(10);
  ImageLoaderOptions o = options(4, 2);
  const std::vector<float> mean = {100.f, 110.f, 120.f}, std = {50.f, 60.f, 70.f};
  ImageLoader twin(ds, ImageTransform::train(8), o);
  ImageDelivery d;
  d.dtype = kBFloat16;
  d.format = MemoryFormat::kContiguous;
  ImageBatchSource source(std::make_unique<ImageLoader>(ds, ImageTransform::train(8), o), mean, std, d);
  for (int i = 0; i < 4; ++i) {
    const Batch b = source.next();
    const ImageBatch expected = twin.next();
    ASSERT_EQ(b.x.shape(), (Shape{expected.size(), 3, 8, 8}));
    EXPECT_EQ(b.x.dtype(), kBFloat16);
    EXPECT_TRUE(b.x.is_contiguous());
    EXPECT_EQ(b.x.device(), Device::cpu());
    // The float32 reference rounded once; compared as float32, which holds every bfloat16 exactly.
    EXPECT_EQ(b.x.to(kFloat32).to_vector<float>(),
              expected.to_float(mean, std).to(kBFloat16).to(kFloat32).contiguous().to_vector<float>());
    EXPECT_EQ(b.y.to_vector<std::int32_t>(), labels_of(expected));
    EXPECT_EQ(source.iteration(), i + 1);
    EXPECT_EQ(source.is_new_epoch(), i == 2);
  }
}

TEST(ImageBatchSource, RefusesABadDeliveryByName) {
  auto ds = std::make_shared<Synthetic>(10);
  const auto loader = [&] { return std::make_unique<ImageLoader>(ds, ImageTransform::train(8), options(4, 1)); };
  ImageDelivery d;
  d.dtype = kInt32;
  DPL_EXPECT_ERROR(ImageBatchSource(loader(), {0.f}, {255.f}, d),
                   HasSubstr("ImageBatchSource: expected a delivery dtype float32, bfloat16 or float16, got int32"));
  d = ImageDelivery{};
  d.device = Device::cuda(cuda_device_count());  // one past the last GPU (cuda:0 without any)
  DPL_EXPECT_ERROR(ImageBatchSource(loader(), {0.f}, {255.f}, d),
                   AllOf(HasSubstr("ImageBatchSource: expected a device that exists, got cuda:"),
                         HasSubstr("GPU(s)")));
}

}  // namespace
