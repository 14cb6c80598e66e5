// GPT-2 training throughput: full training steps of models::GPT2 — forward, cross-entropy over
// every position, backward, gradient clipping to global norm 1.0, AdamW (lr 6e-4, betas 0.9 and
// 0.95, weight decay 0.1 on the matrices and none on the vectors, as nanoGPT groups them) — on
// random tokens that stay on the device. The loss goes through GPT2::loss, which takes the head
// and the loss a chunk of rows at a time so that the logits are never whole; --head logits
// computes them whole (forward, then softmax_cross_entropy), to measure what that saves. The flags and the recipe mirror the PyTorch peer's
// `torch_peer.py gpt2`, so the two records sit side by side. Prints one key=value record:
//   what=gpt2 layers=12 embd=768 heads=12 params=... bs=16 seq=1024 dtype=bfloat16 graph=0
//   tokens_per_s=... step_ms=... peak_mem_bytes=... held_mem_bytes=... device=cuda iters=... loss=...
//   head=chunked
// 16-bit runs compute in that dtype on float32 master weights (optim::mixed_precision). The timed
// steps run back to back with the device synchronised only before the first and after the last.
// peak_mem_bytes is the caching allocator's peak over them (0 on the CPU); held_mem_bytes what
// stays allocated between steps (weights, gradients, masters, optimizer state, the tokens).
// --graph records the step as a CUDA graph after three ordinary steps and replays it, clipping
// included (its norm stays on the device). --profile-steps N runs N more steps at the end with a
// profiler's capture on (cuda::profiler_start/stop), for scripts/gpu_kernel_profile.sh.
// --checkpoint-blocks runs each transformer block under activation checkpointing
// (GPT2::set_checkpoint_blocks); the record then ends with checkpoint_blocks=1.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "device_flags.hpp"

namespace {
using namespace dpl;
using bench::sync;

DType parse_dtype(const std::string& name) {
  return name == "bfloat16" ? kBFloat16 : name == "float16" ? kFloat16 : kFloat32;
}

// Uniform ids in [0, high) of dtype (int64 or int32), on device.
Tensor random_ids(const Shape& shape, std::int64_t high, DType dtype, Generator& gen, Device device) {
  Tensor t = Tensor::empty(shape, dtype);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const auto id = static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(high)));
    if (dtype == kInt64)
      t.data<std::int64_t>()[i] = id;
    else
      t.data<std::int32_t>()[i] = static_cast<std::int32_t>(id);
  }
  return t.to(device);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpl GPT-2 training-step throughput on random tokens"};
  bench::DeviceFlags flags;
  models::GPT2Config config = models::GPT2Config::gpt2_124m();
  std::int64_t batch = 16, seq = 1024;
  std::string dtype_arg = "bfloat16", head = "chunked";
  std::int64_t chunk_rows = 0;
  int iters = 0, warmup = -1;
  double clip = 1.0;
  bool graph = false, checkpoint_blocks = false;
  int profile_steps = 0;
  std::uint64_t seed = 0;
  flags.add_to(app);
  app.add_option("--bs", batch, "sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "tokens per sequence (at most the model's block size)")->check(CLI::PositiveNumber);
  app.add_option("--layers", config.n_layer, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--heads", config.n_head, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--embd", config.n_embd, "width of the residual stream")->check(CLI::PositiveNumber);
  app.add_option("--vocab", config.vocab_size, "vocabulary size")->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype_arg, "float32, bfloat16 or float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  app.add_option("--head", head, "chunked (GPT2::loss) or logits (the whole logits, then the loss)")
      ->check(CLI::IsMember({"chunked", "logits"}));
  app.add_option("--chunk-rows", chunk_rows, "rows per chunk of --head chunked (0: about 256 MiB of logits)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--clip", clip, "gradient clipping to this global norm (0: none)")->check(CLI::NonNegativeNumber);
  app.add_option("--iters", iters, "timed steps (default 30 on cuda, 2 on cpu)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first (default 5 on cuda, 1 on cpu)");
  app.add_option("--seed", seed, "seed of the weights and tokens");
  app.add_flag("--graph", graph, "record the step as a CUDA graph after 3 ordinary steps and replay it (cuda only)");
  app.add_option("--profile-steps", profile_steps, "steps run at the end with a profiler's capture on")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--checkpoint-blocks", checkpoint_blocks,
               "keep only each block's input for backward and compute the block again there");
  CLI11_PARSE(app, argc, argv);

  try {
    Device device;
    if (!flags.resolve("bench_gpt2", device)) return 2;
    const bool cuda = device.is_cuda();
    if (graph && !cuda) {
      std::fprintf(stderr, "bench_gpt2: --graph needs --device cuda\n");
      return 2;
    }
    if (iters == 0) iters = cuda ? 30 : 2;
    if (warmup < 0) warmup = cuda ? 5 : 1;
    if (graph && warmup < 4) warmup = 4;  // three ordinary steps, then the recording
    config.block_size = std::max(config.block_size, seq);
    const DType dtype = parse_dtype(dtype_arg);

    Generator gen(seed);
    const auto model = models::gpt2(config, gen);
    model->to(device);
    model->set_checkpoint_blocks(checkpoint_blocks);
    const Tensor ids = random_ids({batch, seq}, config.vocab_size, kInt64, gen, device);
    // Cross-entropy takes int32 labels, one per position.
    const Tensor targets = random_ids({batch * seq}, config.vocab_size, kInt32, gen, device);

    auto adamw = std::make_unique<optim::AdamW>(optim::AdamWOptions(6e-4f).betas(0.9f, 0.95f).weight_decay(0.1f));
    adamw->add_param_group(optim::ParamGroup::one_dimensional("no decay").weight_decay(0.f));
    const auto opt_ptr = optim::mixed_precision(std::move(adamw), dtype);
    optim::Optimizer& opt = *opt_ptr;
    opt.setup(*model);
    if (clip > 0) optim::clip_gradients(opt, clip);

    const auto loss_of = [&](const Tensor& in, const Tensor& labels) {
      if (head == "chunked") return model->loss(Variable(in), labels, chunk_rows);
      const Variable logits = (*model)(Variable(in));
      return softmax_cross_entropy(reshape(logits, {batch * seq, config.vocab_size}), labels);
    };
    train::CapturedStep captured(opt, [&](const std::vector<Tensor>& in) { return loss_of(in[0], in[1]); });
    auto step = [&]() -> Variable {
      if (graph) return captured.update({ids, targets});
      return opt.update([&] { return loss_of(ids, targets); });
    };

    const bench::StepTimes t = bench::timed_steps(
        device, warmup, iters, graph, step,
        [&] {
          if (graph) captured.settle();  // the last step's non-finite verdict, when it was deferred
        },
        [] {});
    const double seconds = t.seconds;
    const std::size_t peak = t.peak_bytes, held = t.held_bytes;

    // One more step whose loss is read, so that a broken run cannot pass as a fast one.
    const float loss = step().item();
    if (graph) captured.settle();
    bench::profiled_steps(device, profile_steps, step, [&] {
      if (graph) captured.settle();
    });
    const double step_s = seconds / iters;
    std::printf("what=gpt2 layers=%lld embd=%lld heads=%lld params=%lld bs=%lld seq=%lld dtype=%s graph=%d clip=%g "
                "tokens_per_s=%.0f step_ms=%.3f peak_mem_bytes=%zu held_mem_bytes=%zu device=%s iters=%d loss=%.4f "
                "head=%s%s\n",
                static_cast<long long>(config.n_layer), static_cast<long long>(config.n_embd),
                static_cast<long long>(config.n_head), static_cast<long long>(model->num_parameters()),
                static_cast<long long>(batch), static_cast<long long>(seq), dtype_name(dtype), graph ? 1 : 0,
                clip, static_cast<double>(batch * seq) / step_s, step_s * 1e3, peak, held,
                cuda ? "cuda" : "cpu", iters, loss, head.c_str(), checkpoint_blocks ? " checkpoint_blocks=1" : "");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpt2: %s\n", e.what());
    return 1;
  }
}
