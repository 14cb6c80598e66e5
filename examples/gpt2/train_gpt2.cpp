// Data-parallel training of GPT-2 on token shards, nanoGPT's and llm.c's recipe.
//
//   mpiexec -n 2 --bind-to none train_gpt2 -i 'data/pystdlib_train_*.bin' -j 'data/pystdlib_val_*.bin'
//       [--model 124M | --layers L --heads H --embd C] [--vocab V] [--block-size 1024]
//       [-b 8] [-t 1024] [--total-batch-tokens N] [--steps 1000] [--lr 6e-4] [--warmup W]
//       [--weight-decay 0.1] [--clip 1.0] [--dtype float32|bfloat16|float16] [--device cpu|cuda]
//       [--graph] [--overlap] [--log-every 10] [--val-every 100] [--val-steps 20]
//       [--sample-tokens 200] [--top-k 40] [--prompt TEXT] [--encoder encoder.json --merges vocab.bpe]
//       [--snapshot-every N] [--keep 1] [--resume PATH] [--peak-flops 989e12] [--seed 0] [-o result]
//
// Every rank reads its own windows of the training shards (data::TokenLoader) and takes
// --total-batch-tokens / (b·t·p) micro-batches of b sequences per optimizer step, so the
// gradients are averaged over the ranks once per step (MultiNodeOptimizer). AdamW with weight
// decay on the matrices only, clipping to a global norm, a linear warmup and a cosine decay to a
// tenth of the rate. Rank 0 prints a report table, the phase summary across ranks and a sample of
// text, and writes the log and the final weights into the output folder. docs/transformers.md,
// "Training GPT-2 on text", says what each number means.
#include <CLI/CLI.hpp>

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>

#include "../common/flags.hpp"
#include "../common/launch.hpp"
#include "dpl/core/clock.hpp"
#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/models.hpp"
#include "dpl/parallel.hpp"
#include "dpl/train.hpp"
#include "generate.hpp"
#include "loader_state_values.hpp"

namespace {
using namespace dpl;

struct Options {
  std::vector<std::string> train_shards, val_shards;
  std::string model = "124M";
  models::GPT2Config config = models::GPT2Config::gpt2_124m();
  bool vocab_given = false;
  std::int64_t batch = 8, seq_len = 1024, total_batch_tokens = 0, steps = 1000, warmup = 100;
  double lr = 6e-4, weight_decay = 0.1, clip = 1.0;
  DType dtype = kFloat32;
  bool gpu = false, graph = false;
  parallel::OverlapOptions overlap;
  std::int64_t log_every = 10, val_every = 100, val_steps = 20;
  std::int64_t sample_tokens = 200, top_k = 40;
  std::string prompt, encoder, merges;
  std::int64_t snapshot_every = 0, keep = 1;
  std::string resume;
  double peak_flops = 989e12;
  std::uint64_t seed = 0;
  std::string out = "result";
  std::string communicator = "hierarchical";
};

using examples::BadFlag;

/// llm.c's schedule: the rate rises linearly to lr over the first `warmup` steps, lr·(step+1)/warmup
/// (the first step already moves), then falls along a cosine from lr to lr/10 at the last step.
/// A pure function of the step, so a resumed run gets the rates of the uninterrupted one.
class WarmupCosine : public optim::LrSchedule {
 public:
  WarmupCosine(double lr, std::int64_t warmup, std::int64_t steps)
      : lr_(lr), warmup_(warmup), cosine_(lr, lr / 10, std::max<std::int64_t>(1, steps - warmup)) {}
  std::string name() const override { return "WarmupCosine"; }

 protected:
  double compute(std::int64_t step) const override {
    if (step < warmup_) return lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
    return cosine_.lr_at(step - warmup_);
  }

 private:
  double lr_;
  std::int64_t warmup_;
  optim::CosineAnnealing cosine_;
};

/// Training FLOPs per token, as nanoGPT's estimate_mfu (from PaLM's appendix B): 6 per parameter
/// that multiplies (forward 2, backward 4; the position embedding, a lookup, left out; the tied
/// head counted once, as the embedding's matrix product) plus the attention's scores and weighted
/// sum, 12·layers·width·T (the full T×T, not the causal half).
double flops_per_token(const models::GPT2Config& c, std::int64_t seq_len) {
  const auto matmul_parameters = static_cast<double>(c.num_parameters() - c.block_size * c.n_embd);
  return 6.0 * matmul_parameters +
         12.0 * static_cast<double>(c.n_layer) * static_cast<double>(c.n_embd) * static_cast<double>(seq_len);
}

/// The files a flag names: each value a path, or a glob pattern (*, ? or [) whose matches are
/// taken in sorted order. Throws dpl::Error naming the flag and the value that names no file.
std::vector<std::string> expand_shards(const std::string& flag, const std::vector<std::string>& values) {
  std::vector<std::string> paths;
  for (const std::string& value : values) {
    if (value.find_first_of("*?[") == std::string::npos) {
      DPL_CHECK(std::filesystem::is_regular_file(value), "train_gpt2: ", flag, " ", value,
                " is not a file; expected token shards written by text_to_token_shards "
                "(PREFIX_train_000000.bin, ...) or a glob that matches them");
      paths.push_back(value);
      continue;
    }
    glob_t found{};
    const int rc = glob(value.c_str(), 0, nullptr, &found);
    for (std::size_t i = 0; rc == 0 && i < found.gl_pathc; ++i) paths.emplace_back(found.gl_pathv[i]);
    globfree(&found);
    DPL_CHECK(rc == 0, "train_gpt2: ", flag, " '", value,
              "' matches no file; expected token shards written by text_to_token_shards "
              "(PREFIX_train_000000.bin, ...)");
  }
  return paths;
}

/// A host batch of int64 ids as the model reads them: int32 (the loss takes int32 labels), every
/// id checked against the vocabulary here, since the GPU's embedding does not read them back.
Tensor model_ids(const Tensor& ids, std::int64_t vocab, const char* what, int rank, std::int64_t step) {
  const std::vector<std::int64_t> values = ids.to_vector<std::int64_t>();
  std::vector<std::int32_t> narrow(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::int64_t id = values[i];
    if (id >= vocab) {
      const auto seq = ids.size(1), index = static_cast<std::int64_t>(i);
      DPL_FAIL("train_gpt2: token id ", id, " at row ", index / seq, ", position ", index % seq, " of rank ", rank,
               "'s ", what, " batch at step ", step, " is outside the model's vocabulary [0, ", vocab,
               "); expected shards of the model's tokenizer (GPT-2 BPE shards need --vocab 50304, or "
               "--encoder and --merges)");
    }
    narrow[i] = static_cast<std::int32_t>(id);
  }
  return Tensor::from_vector(narrow, ids.shape());
}

/// The mean cross-entropy of predicting labels (B, T) int32 from ids (B, T). GPT2::loss takes the
/// head and the loss a chunk of rows at a time, so the (B*T, vocab) logits are never whole.
Variable next_token_loss(models::GPT2& model, const Tensor& ids, const Tensor& labels) {
  return model.loss(Variable(ids), labels);
}

/// Validation: the mean loss over the first steps·b·p windows of the validation shards, in
/// order, every rank taking its b of each step as the training loader would. Collective.
double validation_loss(models::GPT2& model, const std::vector<std::string>& shards, const Options& o,
                       std::int64_t steps, comm::Communicator& comm, Device device) {
  const NoGradGuard no_grad;
  data::TokenLoader loader(shards, o.batch, o.seq_len, comm.rank(), comm.size(), /*shuffle=*/false);
  double sum = 0.0;
  for (std::int64_t s = 0; s < steps; ++s) {
    const data::TokenBatch b = loader.next();
    const Tensor ids = model_ids(b.inputs, o.config.vocab_size, "validation", comm.rank(), s).to(device);
    const Tensor labels = model_ids(b.targets, o.config.vocab_size, "validation", comm.rank(), s).to(device);
    sum += next_token_loss(model, ids, labels).data().item();
  }
  Tensor total = Tensor::from_vector<float>({static_cast<float>(sum / static_cast<double>(steps))}, {1});
  comm.allreduce(total, comm::ReduceOp::kSum);
  return total.item() / comm.size();
}

/// Writes the model's parameters in float32 under their names, as serialize::save_weights does: a
/// 16-bit model's float32 master weights (what its training kept; the model holds them rounded),
/// or the model's own.
void save_float32_weights(nn::Module& model, const optim::MixedPrecision& precision, const std::string& path) {
  if (precision.dtype() == kFloat32) return serialize::save_weights(model, path);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const nn::ArenaEntry& e : model.arena().entries())
    tensors.emplace_back(e.name, precision.master_params().narrow(0, e.offset, e.numel).reshape(e.shape));
  serialize::save_safetensors(path, tensors);
}

int run(const Options& o_in) {
  Options o = o_in;
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator(o.communicator);
  const bool root = comm->rank() == 0;
  const int p = comm->size();
  // Ranks started with different flags would run different collectives and wait for each other
  // forever: refuse that now, naming the flag and each rank's value.
  comm::check_settings_agree(*comm,
                             {{"model (--layers/--heads/--embd/--vocab/--block-size)",
                               std::to_string(o.config.n_layer) + "/" + std::to_string(o.config.n_head) + "/" +
                                   std::to_string(o.config.n_embd) + "/" + std::to_string(o.config.vocab_size) + "/" +
                                   std::to_string(o.config.block_size)},
                              {"batch size (-b)", std::to_string(o.batch)},
                              {"sequence length (-t)", std::to_string(o.seq_len)},
                              {"total batch tokens (--total-batch-tokens)", std::to_string(o.total_batch_tokens)},
                              {"steps (--steps)", std::to_string(o.steps)},
                              {"dtype (--dtype)", dtype_name(o.dtype)},
                              {"device (--device)", o.gpu ? "cuda" : "cpu"},
                              {"graph capture (--graph)", o.graph ? "on" : "off"},
                              {"overlap (--overlap)", o.overlap.enabled ? "on" : "off"},
                              {"clipping (--clip)", examples::exact_text(o.clip)},
                              {"report interval (--log-every)", std::to_string(o.log_every)},
                              {"validation interval (--val-every)", std::to_string(o.val_every)},
                              {"validation steps (--val-steps)", std::to_string(o.val_steps)},
                              {"validation shards (-j)", o.val_shards.empty() ? "none" : "given"},
                              {"snapshot interval (--snapshot-every)", std::to_string(o.snapshot_every)},
                              {"resumed checkpoint (--resume)", o.resume},
                              {"seed (--seed)", std::to_string(o.seed)}},
                             "train_gpt2");
  const Device device = examples::device_for_rank(o.gpu, *comm);

  // The step's batch: k micro-batches of b sequences on each of the p ranks.
  const std::int64_t per_micro_batch = o.batch * o.seq_len * p;
  if (o.total_batch_tokens == 0) o.total_batch_tokens = per_micro_batch;
  if (o.total_batch_tokens % per_micro_batch != 0) {
    const std::int64_t below = o.total_batch_tokens / per_micro_batch * per_micro_batch;
    DPL_FAIL("train_gpt2: --total-batch-tokens ", o.total_batch_tokens, " is not a multiple of -b x -t x processes = ",
             o.batch, " x ", o.seq_len, " x ", p, " = ", per_micro_batch, "; expected a multiple such as ",
             below > 0 ? std::to_string(below) + " or " : std::string(), below + per_micro_batch,
             " (the micro-batches per step are --total-batch-tokens / (b·t·p))");
  }
  const std::int64_t micro_batches = o.total_batch_tokens / per_micro_batch;
  DPL_CHECK(micro_batches <= std::numeric_limits<int>::max(), "train_gpt2: --total-batch-tokens ",
            o.total_batch_tokens, " needs ", micro_batches, " micro-batches per step; expected at most ",
            std::numeric_limits<int>::max());
  DPL_CHECK(!o.graph || (p == 1 && micro_batches == 1), "train_gpt2: --graph records one micro-batch on one "
            "process, got ", micro_batches, " micro-batch(es) per step on ", p, " process(es); run one process "
            "with --total-batch-tokens equal to -b x -t");

  const std::vector<std::string> train_paths = expand_shards("-i", o.train_shards);
  const std::vector<std::string> val_paths = expand_shards("-j", o.val_shards);
  // Each rank reads b·k windows per step, cut into its k micro-batches below.
  data::TokenLoader loader = data::TokenLoader::with_global_batch(train_paths, o.batch * micro_batches * p,
                                                                  o.seq_len, comm->rank(), p, true, o.seed);
  // Validation reads the same windows each time: as many steps as asked, or as the shards hold.
  std::int64_t val_steps = 0;
  if (!val_paths.empty()) {
    const data::TokenLoader probe(val_paths, o.batch, o.seq_len, comm->rank(), p, false);
    val_steps = std::clamp<std::int64_t>(probe.num_windows() / (o.batch * p), 1, o.val_steps);
  }

  std::unique_ptr<data::Tokenizer> tokenizer;
  if (o.encoder.empty()) tokenizer = std::make_unique<data::ByteTokenizer>();
  else tokenizer = std::make_unique<data::Gpt2Tokenizer>(o.encoder, o.merges);

  Generator init(o.seed);
  const auto model = models::gpt2(o.config, init);
  model->to(device);
  auto adamw = std::make_unique<optim::AdamW>(optim::AdamWOptions(static_cast<float>(o.lr))
                                                  .betas(0.9f, 0.95f)
                                                  .weight_decay(static_cast<float>(o.weight_decay)));
  // nanoGPT's groups: decay on the matrices and embeddings, none on biases and LayerNorm weights.
  adamw->add_param_group(optim::ParamGroup::one_dimensional("no decay").weight_decay(0.f));
  std::unique_ptr<optim::MixedPrecision> precision = optim::mixed_precision(std::move(adamw), o.dtype);
  const optim::MixedPrecision& masters = *precision;  // owned by the optimizer from here on
  auto optimizer = parallel::create_multi_node_optimizer(std::move(precision), comm);
  optimizer->set_overlap(o.overlap);
  optimizer->setup(*model);
  if (o.clip > 0) optim::clip_gradients(*optimizer, o.clip);
  const WarmupCosine schedule(o.lr, o.warmup, o.steps);

  std::optional<train::TrainingLog> log;
  if (root) log.emplace(o.out, "log");
  const std::string run_id = train::new_run_id();
  auto training_state = [&] {
    train::TrainingState state;
    state.model = model.get();
    state.optimizer = optimizer.get();
    state.log = root ? &*log : nullptr;
    state.run_id = run_id;
    return state;
  };
  if (!o.resume.empty()) {
    train::TrainingState state = training_state();
    train::load_checkpoint(o.resume, state, comm.get());
    loader.load_state(examples::loader_state_from_values(state.values, o.resume));
  }

  const double flops = flops_per_token(o.config, o.seq_len);
  if (root) {
    std::cout << "train_gpt2: " << p << " process(es) on " << (o.gpu ? "cuda" : "cpu") << ", " << dtype_name(o.dtype)
              << "\nmodel: " << o.config.n_layer << " layers, " << o.config.n_head << " heads, width "
              << o.config.n_embd << ", vocabulary " << o.config.vocab_size << ", block " << o.config.block_size << ", "
              << model->num_parameters() << " parameters\n"
              << "batch: " << o.total_batch_tokens << " tokens per step = " << micro_batches << " micro-batch(es) x "
              << o.batch << " sequences x " << o.seq_len << " tokens x " << p << " process(es)\n"
              << "train: " << train_paths.size() << " shard(s), " << loader.num_windows() << " windows, "
              << loader.batches_per_epoch() << " steps per epoch\n"
              << "validation: "
              << (val_paths.empty() ? std::string("none (no -j)")
                                    : std::to_string(val_steps * o.batch * p) + " windows, every " +
                                          std::to_string(o.val_every) + " steps and after the last")
              << "\nschedule: " << o.steps << " steps, lr " << o.lr << ", warmup " << o.warmup
              << ", cosine to " << o.lr / 10 << "\n"
              << (o.resume.empty() ? "" : "resumed from " + o.resume + " at step " +
                                              std::to_string(loader.iteration()) + "\n")
              << std::flush;
  }

  const auto loss_of = [&](const Tensor& ids, const Tensor& labels) { return next_token_loss(*model, ids, labels); };
  std::unique_ptr<train::CapturedStep> captured;
  if (o.graph) {
    captured = std::make_unique<train::CapturedStep>(
        *optimizer, [&](const std::vector<Tensor>& in) { return loss_of(in[0], in[1]); });
  }

  train::ReportTable table(std::cout, {"iteration", "epoch", "main/loss", "validation/main/loss", "lr", "tokens/s",
                                       "mfu%", "elapsed_time"});
  profile::PhaseTimer& timer = optimizer->timer();
  // The row's losses are summed on the device and read once a row: reading each step's loss would
  // make the host wait for the device every step, leaving it idle while the next step is queued.
  Tensor row_loss;
  double row_start = now_seconds(), train_seconds = 0.0;
  std::int64_t row_steps = 0, updates = 0;
  const std::int64_t first_step = loader.iteration();
  while (loader.iteration() < o.steps) {
    const std::int64_t step = loader.iteration();
    schedule.apply(*optimizer, step);
    const double t0 = now_seconds();
    const data::TokenBatch batch = loader.next();
    const Tensor ids = model_ids(batch.inputs, o.config.vocab_size, "training", comm->rank(), step).to(device);
    const Tensor labels = model_ids(batch.targets, o.config.vocab_size, "training", comm->rank(), step).to(device);
    // Recorded beside the optimizer's phases, as train::StandardUpdater records it.
    timer.record("data", t0, now_seconds() - t0, updates);
    Variable loss;
    if (captured) {
      loss = captured->update({ids, labels});
    } else {
      loss = optimizer->update(
          [&](int i) {
            return loss_of(ids.narrow(0, i * o.batch, o.batch), labels.narrow(0, i * o.batch, o.batch));
          },
          static_cast<int>(micro_batches));
    }
    const Tensor step_loss = loss.data().to(kFloat32);
    row_loss = row_loss.defined() ? row_loss + step_loss : step_loss.clone();
    timer.record(profile::kIterationSeries, t0, now_seconds() - t0, updates++);
    ++row_steps;

    const std::int64_t done = loader.iteration();
    const bool last = done == o.steps;
    const bool validate = !val_paths.empty() && (last || (o.val_every > 0 && done % o.val_every == 0));
    if (validate || last || done % o.log_every == 0) {
      std::vector<std::pair<std::string, double>> values;
      // The training loss of the row: every rank's mean over the row's steps. Reading it waits for
      // the row's work, so the clock then holds the row's time.
      const float row_sum = row_loss.item();
      const double row_seconds = now_seconds() - row_start;
      train_seconds += row_seconds;
      Tensor mean = Tensor::from_vector<float>({row_sum / static_cast<float>(row_steps)}, {1});
      comm->allreduce(mean, comm::ReduceOp::kSum);
      values.emplace_back("main/loss", mean.item() / p);
      if (validate) values.emplace_back("validation/main/loss", validation_loss(*model, val_paths, o, val_steps, *comm, device));
      const double tokens_per_s = static_cast<double>(row_steps * o.total_batch_tokens) / row_seconds;
      values.emplace_back("lr", schedule.lr_at(step));
      values.emplace_back("tokens/s", tokens_per_s);
      values.emplace_back("mfu%", 100.0 * tokens_per_s * flops / (static_cast<double>(p) * o.peak_flops));
      if (root) table.print(log->end_epoch(loader.epoch(), done, values));
      row_loss = Tensor();
      row_steps = 0;
    }
    if (o.snapshot_every > 0 && done % o.snapshot_every == 0 && !last) {
      train::TrainingState state = training_state();
      state.values = examples::loader_state_values(loader.state());
      const std::string path = (std::filesystem::path(o.out) / train::checkpoint_name(done)).string();
      train::save_checkpoint(path, state, comm.get());
      if (root) train::remove_old_checkpoints(o.out, o.keep, run_id);
    }
    if (row_steps == 0) row_start = now_seconds();  // a new row: validation and snapshots are not its time
  }
  if (captured) captured->settle();

  // Collective: every rank's phase times; the allreduce runs once per optimizer step, whatever k.
  const profile::Summary summary = optimizer->summary();
  const profile::PhaseSeries* allreduce = timer.find("allreduce");
  const std::int64_t steps_run = loader.iteration() - first_step;
  if (root) {
    std::cout << "\nPhase summary (" << p << " process(es), " << micro_batches << " micro-batch(es) per step):\n"
              << profile::format_table(summary) << "allreduce: "
              << (allreduce ? static_cast<std::int64_t>(allreduce->samples.size()) : 0) << " call(s) in " << steps_run
              << " optimizer step(s) of " << micro_batches << " micro-batch(es) each\n";
    if (train_seconds > 0)
      std::cout << "training: " << steps_run << " steps in " << train_seconds << " s, "
                << static_cast<double>(steps_run * o.total_batch_tokens) / train_seconds << " tokens/s\n";
    const std::string weights = (std::filesystem::path(o.out) / "model.safetensors").string();
    save_float32_weights(*model, masters, weights);
    std::cout << "weights: " << weights << " (float32)\n";
    if (o.sample_tokens > 0) {
      examples::SamplingOptions sampling;
      sampling.tokens = o.sample_tokens;
      sampling.top_k = o.top_k;
      sampling.vocabulary = std::min(tokenizer->vocab_size(), o.config.vocab_size);
      sampling.stop_at = tokenizer->end_of_text().value_or(-1);
      std::vector<std::int32_t> prompt = tokenizer->encode(o.prompt);
      if (prompt.empty()) prompt.push_back(tokenizer->end_of_text().value_or(0));  // the start of a document
      Generator gen(o.seed);
      const std::vector<std::int32_t> text = examples::sample_tokens(*model, prompt, sampling, gen, device);
      std::cout << "\nsample (top-k " << o.top_k << ", " << text.size() << " tokens):\n-----\n"
                << o.prompt << tokenizer->decode(text) << "\n-----" << std::endl;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string batch = "8", seq_len = "1024", total = "0", steps = "1000", warmup, lr = "6e-4";
  std::string weight_decay = "0.1", clip = "1.0", dtype = "float32", device = "cpu";
  std::string layers, heads, embd, vocab, block_size;
  std::string log_every = "10", val_every = "100", val_steps = "20", sample_tokens = "200", top_k = "40";
  std::string snapshot_every = "0", keep = "1", peak_flops = "989e12", seed = "0";
  CLI::App app{"Data-parallel GPT-2 training on token shards with dpl"};
  app.add_option("-i,--train", o.train_shards, "Training token shards: files or glob patterns")->expected(1, -1);
  app.add_option("-j,--val", o.val_shards, "Validation token shards: files or glob patterns")->expected(1, -1);
  app.add_option("--model", o.model, "GPT-2 preset: 124M, 350M, 774M, 1558M (or gpt2, gpt2-medium, ...)");
  app.add_option("--layers", layers, "Transformer blocks (overrides the preset's)");
  app.add_option("--heads", heads, "Attention heads (overrides the preset's)");
  app.add_option("--embd", embd, "Width of the residual stream (overrides the preset's)");
  app.add_option("--vocab", vocab, "Vocabulary size (default: 256 for bytes, GPT-2's 50257 padded to 50304)");
  app.add_option("--block-size", block_size, "Longest sequence the model takes (default 1024)");
  app.add_option("-b,--batchsize", batch, "Sequences per micro-batch on each process");
  app.add_option("-t,--seq-len", seq_len, "Tokens per sequence");
  app.add_option("--total-batch-tokens", total,
                 "Tokens per optimizer step over all processes (default: -b x -t x processes)");
  app.add_option("--steps", steps, "Optimizer steps");
  app.add_option("--lr", lr, "Peak learning rate");
  app.add_option("--warmup", warmup,
                 "Steps of linear warmup before the cosine decay to lr/10 (default: a tenth of --steps, at most 100)");
  app.add_option("--weight-decay", weight_decay, "AdamW's weight decay of the matrices");
  app.add_option("--clip", clip, "Clip gradients to this global norm (0: no clipping)");
  app.add_option("--dtype", dtype, "float32, bfloat16 or float16 (16-bit on float32 master weights)");
  app.add_option("--device", device, "cpu or cuda (one GPU per process)");
  app.add_flag("--graph", o.graph, "Record the step as a CUDA graph and replay it (one process, one micro-batch)");
  app.add_flag("--overlap", o.overlap.enabled, "Average each bucket of gradients while backward still runs");
  app.add_option("--log-every", log_every, "Steps per report row");
  app.add_option("--val-every", val_every, "Steps between validations (0: after the last step only)");
  app.add_option("--val-steps", val_steps, "Validation steps of -b sequences per process");
  app.add_option("--sample-tokens", sample_tokens, "Tokens of text sampled at the end (0: none)");
  app.add_option("--top-k", top_k, "Sample among the k most likely tokens (1: greedy)");
  app.add_option("--prompt", o.prompt, "Text the sample continues (default: the start of a document)");
  app.add_option("--encoder", o.encoder, "GPT-2's encoder.json, to decode the sample with GPT-2's tokenizer");
  app.add_option("--merges", o.merges, "GPT-2's vocab.bpe, with --encoder");
  app.add_option("--snapshot-every", snapshot_every, "Write a checkpoint into the output folder every N steps (0: never)");
  app.add_option("--keep", keep, "Number of the newest checkpoints to keep");
  app.add_option("--resume", o.resume, "Continue the run saved in this checkpoint");
  app.add_option("--peak-flops", peak_flops, "Peak FLOP/s of one device, for MFU (default: H100/H200 bfloat16 dense)");
  app.add_option("--seed", seed, "Seed of the weights, the data order and the sample");
  app.add_option("-o,--out", o.out, "Output folder: log, checkpoints, final weights");
  app.add_option("--communicator", o.communicator, "Type of communicator");
  CLI11_PARSE(app, argc, argv);
  try {
    using examples::parse_real;
    using examples::parse_whole;
    constexpr std::uint64_t kBig = std::uint64_t{1} << 40;
    if (o.train_shards.empty())
      throw BadFlag{"-i must name the training token shards (files or a glob such as 'data/pystdlib_train_*.bin')"};
    try {
      o.config = models::GPT2Config::preset(o.model);
    } catch (const Error& e) {
      throw BadFlag{std::string("--model: ") + e.what()};
    }
    if (!layers.empty()) o.config.n_layer = static_cast<std::int64_t>(parse_whole("--layers", layers, 1, 1024));
    if (!heads.empty()) o.config.n_head = static_cast<std::int64_t>(parse_whole("--heads", heads, 1, 1024));
    if (!embd.empty()) o.config.n_embd = static_cast<std::int64_t>(parse_whole("--embd", embd, 1, 65536));
    if (!block_size.empty())
      o.config.block_size = static_cast<std::int64_t>(parse_whole("--block-size", block_size, 1, 1 << 20));
    const bool gpt2_tokens = !o.encoder.empty();
    o.config.vocab_size = vocab.empty() ? (gpt2_tokens ? 50304 : data::ByteTokenizer().vocab_size())
                                        : static_cast<std::int64_t>(parse_whole("--vocab", vocab, 1, 65536));
    if (o.config.n_embd % o.config.n_head != 0)
      throw BadFlag{"--heads " + std::to_string(o.config.n_head) + " must divide --embd " +
                    std::to_string(o.config.n_embd)};
    o.batch = static_cast<std::int64_t>(parse_whole("-b", batch, 1, 1 << 20));
    o.seq_len = static_cast<std::int64_t>(parse_whole("-t", seq_len, 1, 1 << 20));
    if (o.seq_len > o.config.block_size)
      throw BadFlag{"-t " + std::to_string(o.seq_len) + " is longer than the model's block size " +
                    std::to_string(o.config.block_size) + " (--block-size); expected -t <= " +
                    std::to_string(o.config.block_size)};
    o.total_batch_tokens = static_cast<std::int64_t>(parse_whole("--total-batch-tokens", total, 0, kBig));
    o.steps = static_cast<std::int64_t>(parse_whole("--steps", steps, 1, kBig));
    o.warmup = warmup.empty() ? std::min<std::int64_t>(100, o.steps / 10)
                              : static_cast<std::int64_t>(parse_whole("--warmup", warmup, 0, kBig));
    if (o.warmup > o.steps)
      throw BadFlag{"--warmup " + warmup + " is longer than --steps " + steps + "; expected --warmup <= --steps"};
    o.lr = parse_real("--lr", lr, 0, 10);
    o.weight_decay = parse_real("--weight-decay", weight_decay, 0, 10);
    o.clip = parse_real("--clip", clip, 0, 1e9);
    if (dtype == "float32") o.dtype = kFloat32;
    else if (dtype == "bfloat16") o.dtype = kBFloat16;
    else if (dtype == "float16") o.dtype = kFloat16;
    else throw BadFlag{"--dtype must be float32, bfloat16 or float16, got '" + dtype + "'"};
    if (device != "cpu" && device != "cuda") throw BadFlag{"--device must be cpu or cuda, got '" + device + "'"};
    o.gpu = device == "cuda";
    if (o.graph && !o.gpu) throw BadFlag{"--graph records the step as a CUDA graph and needs --device cuda"};
    o.log_every = static_cast<std::int64_t>(parse_whole("--log-every", log_every, 1, kBig));
    o.val_every = static_cast<std::int64_t>(parse_whole("--val-every", val_every, 0, kBig));
    o.val_steps = static_cast<std::int64_t>(parse_whole("--val-steps", val_steps, 1, kBig));
    o.sample_tokens = static_cast<std::int64_t>(parse_whole("--sample-tokens", sample_tokens, 0, 1 << 20));
    o.top_k = static_cast<std::int64_t>(parse_whole("--top-k", top_k, 1, 1 << 20));
    if (o.encoder.empty() != o.merges.empty())
      throw BadFlag{"--encoder and --merges name GPT-2's two tokenizer files and come together"};
    o.snapshot_every = static_cast<std::int64_t>(parse_whole("--snapshot-every", snapshot_every, 0, kBig));
    o.keep = static_cast<std::int64_t>(parse_whole("--keep", keep, 1, 1000000));
    o.peak_flops = parse_real("--peak-flops", peak_flops, 1, 1e30);
    o.seed = parse_whole("--seed", seed, 0, static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
    if (o.out.empty()) throw BadFlag{"-o must name an output folder, got an empty string"};
  } catch (const BadFlag& e) {
    std::cerr << "train_gpt2: " << e.message << "\n";
    return 2;
  }
  return examples::run_or_abort(o.out, [&] { return run(o); });
}
