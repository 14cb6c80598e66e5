// CUDA graphs: cuda::Graph on its own, and train::CapturedStep, whose replayed training steps must
// give the results of ordinary steps (bit-identical where the kernels are deterministic), follow
// per-step values (learning rate, Adam's bias correction, each step's batch), skip or stop on
// non-finite gradients, and never touch memory allocated outside the recording.
#include <gmock/gmock.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "support/expect_error.hpp"

namespace dpl::test {
namespace {
using ::testing::AllOf;
using ::testing::HasSubstr;

class GraphTest : public CudaTest {};

TEST_F(GraphTest, ReplaysTheRecordedKernelsOnTheCurrentContents) {
  Tensor x = Tensor::full({1000}, 1.0, gpu());
  Tensor y = Tensor::zeros({1000}, TensorOptions(kFloat32, gpu()));
  cuda::Graph graph;
  EXPECT_FALSE(graph.captured());
  EXPECT_FALSE(cuda::is_capturing(0));
  bool seen_capturing = false;
  graph.capture(0, [&] {
    seen_capturing = cuda::is_capturing(0);
    y.copy_(affine(Variable(x), 2.f, 1.f).data());
  });
  EXPECT_TRUE(seen_capturing);
  EXPECT_TRUE(graph.captured());
  EXPECT_EQ(graph.device(), 0);
  EXPECT_EQ(y.to(Device::cpu()).at<float>({0}), 0.f) << "recording must not run the work";
  graph.replay();
  EXPECT_EQ(y.to(Device::cpu()).at<float>({999}), 3.f);
  x.fill_(5.0);
  graph.replay();
  EXPECT_EQ(y.to(Device::cpu()).at<float>({7}), 11.f);
}

TEST_F(GraphTest, WorkThatReadsBackFailsTheRecordingWithTheReason) {
  Tensor x = Tensor::full({4}, 1.0, gpu());
  cuda::Graph graph;
  DPL_EXPECT_ERROR(graph.capture(0, [&] { (void)sum(Variable(x)).item(); }),
                   AllOf(HasSubstr("CUDA graph"), HasSubstr("read a value back")));
  EXPECT_FALSE(graph.captured());
  EXPECT_FALSE(cuda::is_capturing(0));
  // The device works normally afterwards.
  EXPECT_EQ(sum(Variable(x)).item(), 4.f);
  DPL_EXPECT_ERROR(graph.replay(), HasSubstr("nothing was recorded"));
}

// --- CapturedStep ----------------------------------------------------------------------------

constexpr std::int64_t kBatch = 32, kIn = 64, kUnits = 128, kOut = 10;

struct Batches {
  std::vector<Tensor> x, y;
};

class CapturedStepTest : public CudaTest {
 protected:
  Batches batches(int n, std::int64_t batch = kBatch) {
    Batches b;
    for (int i = 0; i < n; ++i) {
      b.x.push_back(rand({batch, kIn}));
      b.y.push_back(labels(batch, kOut));
    }
    return b;
  }
};

struct MlpRun {
  std::vector<float> params;
  std::vector<float> losses;
  std::int64_t t = 0, skipped = 0, replays = 0, unrecorded = 0;
  std::string error;    // a stop's message, caught
  int stopped_at = -1;  // the step whose update (or, past the last, settle()) threw
};

// Trains an MLP with Adam over the batches, the learning rate changing every step; recorded
// after 3 ordinary steps when `graph` is set.
MlpRun train_mlp(const Batches& data, bool graph, std::uint64_t seed,
                 optim::NonFinitePolicy policy = optim::NonFinitePolicy::kStop, int skip_from = -1) {
  Generator gen(seed);
  nn::MLP model(kUnits, kIn, kOut, gen);
  model.to(gpu());
  optim::Adam opt(1e-2f);
  opt.set_weight_decay(1e-4f);
  opt.set_non_finite_policy(policy);
  opt.setup(model);
  train::CapturedStep step(opt, [&](const std::vector<Tensor>& in) {
    return softmax_cross_entropy(model(Variable(in[0])), in[1]);
  });
  MlpRun run;
  std::size_t i = 0;
  try {
    for (; i < data.x.size(); ++i) {
      opt.set_lr(1e-2f / static_cast<float>(i + 1));
      if (static_cast<int>(i) == skip_from) opt.set_non_finite_policy(optim::NonFinitePolicy::kSkip);
      const Tensor x = data.x[i].to(gpu()), y = data.y[i].to(gpu());
      const Variable loss = graph ? step.update({x, y})
                                  : opt.update([&] { return softmax_cross_entropy(model(Variable(x)), y); });
      run.losses.push_back(loss.data().to(Device::cpu()).at<float>({}));
    }
    step.settle();
  } catch (const Error& e) {
    run.error = e.what();
    run.stopped_at = static_cast<int>(i);
  }
  run.params = model.arena().params().to(Device::cpu()).to_vector<float>();
  run.t = opt.t();
  run.skipped = opt.skipped_steps();
  run.replays = step.replays();
  run.unrecorded = step.unrecorded_steps();
  return run;
}

TEST_F(CapturedStepTest, MlpAdamStepsAreBitIdenticalToOrdinarySteps) {
  const Batches data = batches(12);
  const MlpRun plain = train_mlp(data, false, seed_);
  const MlpRun graphed = train_mlp(data, true, seed_);
  EXPECT_EQ(graphed.unrecorded, 3);
  EXPECT_EQ(graphed.replays, 9);
  EXPECT_EQ(graphed.t, 12);
  EXPECT_EQ(graphed.losses, plain.losses);
  EXPECT_EQ(graphed.params, plain.params);
}

// float16 on float32 masters with loss scaling, recorded after 3 ordinary steps when `graph` is
// set. The first scale (2^24) overflows the scaled gradients (the logits' alone reach 2^24 / 32
// and float16 ends at 65504), so at least the first four steps are skipped, each halving it,
// replays among them; a growth interval of 3 then grows it again: the replays must follow each
// change.
MlpRun train_mlp_float16(const Batches& data, bool graph, std::uint64_t seed, double* final_scale) {
  Generator gen(seed);
  nn::MLP model(kUnits, kIn, kOut, gen);
  model.to(gpu());
  optim::LossScaling scaling;
  scaling.init_scale = 16777216.0;
  scaling.growth_interval = 3;
  auto opt = optim::mixed_precision(std::make_unique<optim::MomentumSGD>(0.05f, 0.9f), kFloat16, scaling);
  opt->setup(model);
  const auto loss_of = [&](const Tensor& x, const Tensor& y) {
    return softmax_cross_entropy(model(Variable(x.to(kFloat16))), y);
  };
  train::CapturedStep step(*opt, [&](const std::vector<Tensor>& in) { return loss_of(in[0], in[1]); });
  MlpRun run;
  for (std::size_t i = 0; i < data.x.size(); ++i) {
    const Tensor x = data.x[i].to(gpu()), y = data.y[i].to(gpu());
    const Variable loss = graph ? step.update({x, y}) : opt->update([&] { return loss_of(x, y); });
    run.losses.push_back(loss.data().to(kFloat32).to(Device::cpu()).at<float>({}));
  }
  step.settle();
  run.params = model.arena().params().to(kFloat32).to(Device::cpu()).to_vector<float>();
  run.t = opt->t();
  run.skipped = opt->skipped_steps();
  run.replays = step.replays();
  *final_scale = opt->loss_scale();
  return run;
}

TEST_F(CapturedStepTest, Float16LossScalingReplaysFollowTheScaleOfEachStep) {
  const Batches data = batches(24);
  double plain_scale = 0, graphed_scale = 0;
  const MlpRun plain = train_mlp_float16(data, false, seed_, &plain_scale);
  const MlpRun graphed = train_mlp_float16(data, true, seed_, &graphed_scale);
  EXPECT_EQ(graphed.replays, 21);
  ASSERT_GT(plain.skipped, 3);   // skipped after the recording too, so a stale scale would show
  ASSERT_LT(plain.skipped, 21);  // and good steps after them, so growth shows too
  EXPECT_EQ(graphed.skipped, plain.skipped);
  EXPECT_EQ(graphed_scale, plain_scale);
  EXPECT_EQ(graphed.t, plain.t);
  EXPECT_EQ(graphed.params, plain.params);
}

TEST_F(CapturedStepTest, ABatchOfAnotherShapeRunsUnrecorded) {
  Batches data = batches(9);
  const Batches odd = batches(1, kBatch - 5);
  data.x[6] = odd.x[0];
  data.y[6] = odd.y[0];
  const MlpRun plain = train_mlp(data, false, seed_);
  const MlpRun graphed = train_mlp(data, true, seed_);
  EXPECT_EQ(graphed.unrecorded, 4);
  EXPECT_EQ(graphed.replays, 5);
  EXPECT_EQ(graphed.params, plain.params);
}

TEST_F(CapturedStepTest, NonFiniteStepsSkipOnTheDeviceOrStop) {
  Batches data = batches(8);
  data.x[5].set<float>({1, 2}, std::numeric_limits<float>::quiet_NaN());
  const MlpRun plain = train_mlp(data, false, seed_, optim::NonFinitePolicy::kSkip);
  const MlpRun graphed = train_mlp(data, true, seed_, optim::NonFinitePolicy::kSkip);
  EXPECT_EQ(graphed.skipped, 1);
  EXPECT_EQ(graphed.t, 7);
  EXPECT_EQ(graphed.params, plain.params);

  // Under kStop the verdict on a replayed step is read during the next update(): the run stops
  // there, with the parameters and the state of the last finite step, as ordinary steps leave them.
  const MlpRun plain_stop = train_mlp(data, false, seed_, optim::NonFinitePolicy::kStop);
  const MlpRun graphed_stop = train_mlp(data, true, seed_, optim::NonFinitePolicy::kStop);
  EXPECT_EQ(plain_stop.stopped_at, 5);
  EXPECT_THAT(plain_stop.error, AllOf(HasSubstr("iteration 6"), HasSubstr("non-finite gradient")));
  EXPECT_EQ(graphed_stop.stopped_at, 6);
  EXPECT_THAT(graphed_stop.error,
              AllOf(HasSubstr("iteration 6"), HasSubstr("non-finite gradient"), HasSubstr("the loss was NaN")));
  EXPECT_EQ(graphed_stop.params, plain_stop.params);
  EXPECT_EQ(graphed_stop.t, plain_stop.t);

  // A non-finite last step is reported by settle().
  Batches last = batches(6);
  last.x[5].set<float>({0, 0}, std::numeric_limits<float>::infinity());
  const MlpRun plain_last = train_mlp(last, false, seed_, optim::NonFinitePolicy::kStop);
  const MlpRun graphed_last = train_mlp(last, true, seed_, optim::NonFinitePolicy::kStop);
  EXPECT_EQ(graphed_last.stopped_at, 6);
  EXPECT_THAT(graphed_last.error, HasSubstr("iteration 6"));
  EXPECT_EQ(graphed_last.params, plain_last.params);
}

// A recording made under kStop keeps the flag raised once raised; switched to kSkip, the step is
// recorded again, so that one non-finite batch skips one step and training goes on.
TEST_F(CapturedStepTest, APolicyChangedAfterTheRecordingIsRecordedAgain) {
  Batches data = batches(10);
  data.x[7].set<float>({0, 1}, std::numeric_limits<float>::quiet_NaN());
  const MlpRun plain = train_mlp(data, false, seed_, optim::NonFinitePolicy::kStop, 6);
  const MlpRun graphed = train_mlp(data, true, seed_, optim::NonFinitePolicy::kStop, 6);
  EXPECT_EQ(graphed.error, "");
  EXPECT_EQ(graphed.skipped, 1);
  EXPECT_EQ(graphed.t, 9);
  EXPECT_EQ(graphed.replays, 7);
  EXPECT_EQ(graphed.params, plain.params);
}

TEST_F(CapturedStepTest, ReplaysNeverTouchMemoryAllocatedOutsideTheRecording) {
  Generator gen(seed_);
  nn::MLP model(kUnits, kIn, kOut, gen);
  model.to(gpu());
  optim::MomentumSGD opt(0.05f, 0.9f);
  opt.setup(model);
  train::CapturedStep step(opt, [&](const std::vector<Tensor>& in) {
    return softmax_cross_entropy(model(Variable(in[0])), in[1]);
  });
  const Batches data = batches(1);
  for (int i = 0; i < 4; ++i) step.update({data.x[0], data.y[0]});
  ASSERT_TRUE(step.captured());
  // Blocks of every size class, allocated after the recording freed its temporaries.
  std::vector<Tensor> outside;
  for (std::int64_t n : {16, 1000, 100000, 3000000}) outside.push_back(Tensor::full({n}, 7.0, gpu()));
  for (int i = 0; i < 5; ++i) step.update({data.x[0], data.y[0]});
  for (const Tensor& t : outside) {
    const std::vector<float> v = t.to(Device::cpu()).to_vector<float>();
    for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], 7.f) << "element " << i << " of " << v.size();
  }
}

TEST_F(CapturedStepTest, ALossFunctionThatReadsBackCannotBeRecorded) {
  Generator gen(seed_);
  nn::MLP model(kUnits, kIn, kOut, gen);
  model.to(gpu());
  optim::SGD opt(0.05f);
  opt.setup(model);
  train::CapturedStep step(opt, [&](const std::vector<Tensor>& in) {
    const Variable loss = softmax_cross_entropy(model(Variable(in[0])), in[1]);
    if (loss.data().item() > 1e9f) std::abort();  // a value read back: frozen in a recording
    return loss;
  }, 1);
  const Batches data = batches(1);
  step.update({data.x[0], data.y[0]});
  DPL_EXPECT_ERROR(step.update({data.x[0], data.y[0]}), HasSubstr("recording a CUDA graph failed"));
  EXPECT_FALSE(step.captured());
  EXPECT_FALSE(opt.replay_mode());
}

TEST_F(CapturedStepTest, BFloat16ChannelsLastResNetTrainsLikeOrdinarySteps) {
  const auto run = [&](bool graph) {
    Generator gen(seed_);
    models::ResNetOptions options;
    options.num_classes = 5;
    const auto model = models::resnet("resnet18", options, gen);
    model->to(gpu());
    nn::to_channels_last(*model);
    auto opt = optim::mixed_precision(std::make_unique<optim::MomentumSGD>(0.05f, 0.9f), kBFloat16);
    opt->set_weight_decay(1e-4f);
    opt->setup(*model);
    train::CapturedStep step(*opt, [&](const std::vector<Tensor>& in) {
      return softmax_cross_entropy((*model)(Variable(in[0])), in[1]);
    });
    Generator data_gen(seed_ + 1);
    std::vector<float> losses;
    for (int i = 0; i < 8; ++i) {
      opt->set_lr(0.05f / static_cast<float>(i + 1));
      const Tensor x = Tensor::uniform({4, 3, 32, 32}, -1.f, 1.f, data_gen, gpu()).to_channels_last().to(kBFloat16);
      std::vector<std::int32_t> y(4);
      for (auto& l : y) l = static_cast<std::int32_t>(data_gen.below(5));
      const Tensor labels = Tensor::from_vector(y, {4}, gpu());
      const Variable loss = graph ? step.update({x, labels}) : opt->update([&] {
        return softmax_cross_entropy((*model)(Variable(x)), labels);
      });
      losses.push_back(loss.data().to(kFloat32).to(Device::cpu()).at<float>({}));
    }
    EXPECT_EQ(step.replays(), graph ? 5 : 0);
    return std::make_pair(losses, model->arena().params().to(kFloat32).to(Device::cpu()));
  };
  const auto plain = run(false);
  const auto graphed = run(true);
  // cuDNN may choose non-deterministic algorithms (atomics in the weight gradients), so two
  // ordinary runs already differ in the last bits; a replay that missed a step's batch or its
  // learning rate would be off by far more.
  ASSERT_EQ(plain.first.size(), graphed.first.size());
  for (std::size_t i = 0; i < plain.first.size(); ++i)
    EXPECT_NEAR(graphed.first[i], plain.first[i], 2e-2 * std::fabs(plain.first[i]) + 1e-3) << "loss of step " << i;
  expect_close(graphed.second, plain.second, 5e-2f, 5e-3f, "bfloat16 ResNet-18 parameters after 8 steps");
}

TEST_F(CapturedStepTest, StandardUpdaterObservesEachReplaysValues) {
  const data::Dataset dataset(rand({kBatch * 6, kIn}), labels(kBatch * 6, kOut));
  const auto run = [&](bool graph) {
    Generator gen(seed_);
    data::BatchIterator it(dataset, kBatch, false, 0);
    nn::MLP model(kUnits, kIn, kOut, gen);
    model.to(gpu());
    optim::Adam opt(1e-2f);
    opt.setup(model);
    train::StandardUpdater updater(it, opt, [&](const data::Batch& b, train::Observation& observation) {
      const Variable logits = model(Variable(b.x));
      observation.observe("main/accuracy", accuracy(logits, b.y));
      return softmax_cross_entropy(logits, b.y);
    }, gpu());
    if (graph) updater.set_graph_capture(true);
    train::Observation observation;
    std::vector<std::pair<std::string, double>> means;
    for (int i = 0; i < 12; ++i) {
      updater.update(observation);
      if (i % 4 == 3)
        for (const auto& m : observation.take_means()) means.push_back(m);
    }
    if (graph) {
      EXPECT_EQ(updater.captured_step()->replays(), 9);
    }
    return means;
  };
  EXPECT_EQ(run(true), run(false));
}

TEST_F(CapturedStepTest, StandardUpdaterRefusesWhatCannotBeRecorded) {
  Generator gen(seed_);
  data::Dataset dataset(rand({kBatch, kIn}), labels(kBatch, kOut));
  data::BatchIterator it(dataset, kBatch, false, 0);
  nn::MLP model(kUnits, kIn, kOut, gen);
  optim::SGD opt(0.1f);
  opt.setup(model);
  const auto loss = [&](const data::Batch& b, train::Observation&) {
    return softmax_cross_entropy(model(Variable(b.x)), b.y);
  };
  train::StandardUpdater on_cpu(it, opt, loss);
  DPL_EXPECT_ERROR(on_cpu.set_graph_capture(true), HasSubstr("needs a CUDA device"));
  model.to(gpu());
  opt.add_gradient_hook([](nn::ParameterArena&) {});  // not device-only
  train::StandardUpdater hooked(it, opt, loss, gpu());
  DPL_EXPECT_ERROR(hooked.set_graph_capture(true), HasSubstr("gradient hook"));
  EXPECT_FALSE(hooked.graph_capture());
}

}  // namespace
}  // namespace dpl::test
