// A tiny GPT-2 trained data-parallel on the CPU from a token shard: the pieces a language-model
// program is made of (ByteTokenizer, a token shard, TokenLoader's per-rank windows, models::GPT2,
// AdamW in nanoGPT's two groups, clipping, gradient accumulation, MultiNodeOptimizer) working
// together under mpiexec. The loss must fall and every rank must hold the same parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "dist_test_util.hpp"
#include "support/temp_dir.hpp"
#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/models.hpp"
#include "dpl/parallel.hpp"

namespace {
using namespace dpl;

TEST(Gpt2Training, ATinyModelLearnsATextOnEveryRank) {
  comm::Communicator& comm = test::communicator("hierarchical");
  // Each rank writes its own copy of the one shard: the loader's order depends on the shards'
  // sizes and the seed only, so the copies' paths may differ.
  test::TempDir dir("dpl_gpt2_training_" + std::to_string(comm.rank()));
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the quick brown fox jumps over the lazy dog; ";
  const data::ByteTokenizer tokenizer;
  std::vector<std::uint16_t> tokens;
  for (const std::int32_t id : tokenizer.encode(text)) tokens.push_back(static_cast<std::uint16_t>(id));
  const std::string shard = dir.file("train_000000.bin");
  data::write_token_shard(shard, tokens);

  constexpr std::int64_t kSeq = 32, kGlobalBatch = 12;  // 12 windows per step on 1 to 4 ranks
  constexpr int kMicroBatches = 2, kSteps = 40;
  data::TokenLoader loader = data::TokenLoader::with_global_batch({shard}, kGlobalBatch * kMicroBatches, kSeq,
                                                                   comm.rank(), comm.size(), true, 3);

  models::GPT2Config config;
  config.vocab_size = tokenizer.vocab_size();
  config.block_size = kSeq;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 32;
  Generator gen(5);
  const auto model = models::gpt2(config, gen);
  auto adamw = std::make_unique<optim::AdamW>(optim::AdamWOptions(3e-3f).betas(0.9f, 0.95f).weight_decay(0.1f));
  adamw->add_param_group(optim::ParamGroup::one_dimensional("no decay").weight_decay(0.f));
  auto opt = parallel::create_multi_node_optimizer(std::move(adamw), test::shared_communicator("hierarchical"));
  opt->setup(*model);
  optim::clip_gradients(*opt, 1.0);

  // The loader serves one global batch of kMicroBatches x kGlobalBatch windows per step; each
  // rank's share is cut into the micro-batches.
  const auto loss_of = [&](const data::TokenBatch& b, int i) {
    const std::int64_t rows = b.inputs.size(0) / kMicroBatches;
    const Tensor in = b.inputs.narrow(0, i * rows, rows).contiguous();
    // Cross-entropy takes int32 labels; the loader serves int64 ids.
    std::vector<std::int32_t> labels;
    for (const std::int64_t id : b.targets.narrow(0, i * rows, rows).contiguous().to_vector<std::int64_t>())
      labels.push_back(static_cast<std::int32_t>(id));
    const Tensor out = Tensor::from_vector(labels, {rows * kSeq});
    const Variable logits = (*model)(Variable(in));
    return softmax_cross_entropy(reshape(logits, {rows * kSeq, config.vocab_size}), out);
  };
  float first = 0.f, last = 0.f;
  for (int s = 0; s < kSteps; ++s) {
    const data::TokenBatch batch = loader.next();
    const float loss = opt->update([&](int i) { return loss_of(batch, i); }, kMicroBatches).data().to_vector<float>()[0];
    if (s == 0) first = loss;
    last = loss;
  }
  if (comm.rank() == 0) std::printf("tiny GPT-2 on %d rank(s): loss %.3f -> %.3f\n", comm.size(), first, last);
  // ln(256) = 5.55 at the start; a text this repetitive is learned well within 40 steps.
  EXPECT_GT(first, 4.5f);
  EXPECT_LT(last, 2.5f) << "the loss went from " << first << " to " << last;
  EXPECT_TRUE(test::same_on_every_rank(comm, model->arena().params()));
}

}  // namespace
