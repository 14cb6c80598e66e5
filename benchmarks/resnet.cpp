// ResNet training throughput: full training steps (forward, softmax cross-entropy, backward,
// MomentumSGD with momentum 0.9 and weight decay 1e-4) of one of dpl::models' ResNets on a
// synthetic batch that stays on the device, with random labels. Prints one key=value record:
//   arch=resnet50 batch=128 dtype=float32 layout=nchw img_per_s=... step_ms=... peak_mem_bytes=...
//   device=cuda iters=... loss=...
// The timed steps run back to back with the device synchronised only before the first and after
// the last, so the figure is the steady-state rate the device sustains. peak_mem_bytes is the
// caching allocator's peak over those steps (0 on the CPU); held_mem_bytes what stays allocated
// between steps (weights, gradients, optimizer state, the batch), so that the difference is what
// one step's activations and workspaces take. --graph records the step as a CUDA graph after
// three ordinary steps and replays it (train::CapturedStep).
//
// --reduce after|overlap adds the data-parallel gradient allreduce of this process alone (run it
// under mpiexec for more ranks) in buckets (parallel::GradientReducer, --bucket-mb,
// --first-bucket-mb) over --communicator in the --wire dtype: after backward, or overlapped with
// it. The same buckets run either way, so the two differ only in the overlap; the record then
// adds the mean bucket time per step and the mean exposed part (what the step waited for after
// backward; on a GPU both are the GPU's, from events).
//
// --multi-node runs the step through parallel::MultiNodeOptimizer wrapping the (mixed-precision)
// optimizer instead, as the training examples do, so that the cost of its data-parallel features
// can be measured: --reduce after|overlap (after when not given) then sets its overlap, with the
// same buckets, communicator and wire; --zero 1|2 shards the optimizer state over the ranks
// (ZeRO: stage 1 reduce-scatters after backward and so refuses overlap, stage 2 bucket by
// bucket, during backward with overlap); --buffer-sync off|before-use|every-step says when the
// ranks' BatchNorm statistics are made equal (before-use, the library's default, fires only
// where the model is used outside a step, which this benchmark never does, so it costs what off
// costs; every-step adds the phase "buffers" to each step). The record then adds
//   reduce=after communicator=naive ranks=2 rank=0 wire=float32 multi_node=1 zero=1
//   buffer_sync=every-step optimizer_state_bytes=... buffers_ms=... phase_ms=compute:...,...
// optimizer_state_bytes is this rank's (it falls as 1/ranks under --zero 1 and 2); buffers_ms and
// phase_ms are the optimizer's phase means over the timed steps across ranks (its summary), on
// the host's clock: on a GPU the time to queue a phase's work, not to run it. buffers_ms is 0
// where the phase never ran (one rank, or buffer sync not every step). --graph records the step
// through it only where the library can (one process, --zero 0, --reduce after).
//
// --fused-statistics on|off (on by default, as models::ResNetOptions) says whether each
// convolution computes its BatchNorm's statistics in its own kernel where the GPU build can, or the
// BatchNorm makes its own pass; the record ends with fused_statistics=1|0.
// --checkpoint-blocks runs each residual block under activation checkpointing
// (models::ResNetOptions::checkpoint_blocks); the record then ends with checkpoint_blocks=1.
//
// --profile-steps N runs N more steps at the end with a profiler's capture on
// (cuda::profiler_start/stop), for scripts/gpu_kernel_profile.sh.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "device_flags.hpp"

namespace {
using namespace dpl;
using bench::sync;

DType parse_dtype(const std::string& name) {
  return name == "bfloat16" ? kBFloat16 : name == "float16" ? kFloat16 : kFloat32;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpl ResNet training-step throughput on synthetic data"};
  bench::DeviceFlags flags;
  std::string arch = "resnet50", dtype_arg = "float32", layout = "nchw";
  int iters = 0, warmup = -1, profile_steps = 0;
  std::int64_t batch = 128, image_size = 224, classes = 1000;
  float lr = 0.1f;
  std::uint64_t seed = 0;
  bool graph = false, memory_breakdown = false;
  std::string fused_statistics = "on";
  bool checkpoint_blocks = false;
  std::string reduce = "none", communicator = "pure_nccl", wire_arg = "float32", buffer_sync_arg = "before-use";
  bool multi_node = false;
  int zero = 0;
  double bucket_mb = 25.0, first_bucket_mb = 1.0;
  flags.add_to(app);
  app.add_option("-a,--arch", arch, "resnet18, resnet34, resnet50, resnet101 or resnet152")
      ->check(CLI::IsMember(models::resnet_archs()));
  app.add_option("-b,--batch", batch, "images per step")->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype_arg, "float32, bfloat16 or float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  app.add_option("--layout", layout, "nchw, or nhwc (channels-last input and convolution weights)")
      ->check(CLI::IsMember({"nchw", "nhwc"}));
  app.add_option("--image-size", image_size, "height and width of the synthetic images")->check(CLI::PositiveNumber);
  app.add_option("--classes", classes, "outputs of the final layer")->check(CLI::PositiveNumber);
  app.add_option("--iters", iters, "timed steps (default 100 on cuda, 5 on cpu)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first (default 10 on cuda, 1 on cpu)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--lr", lr, "learning rate of MomentumSGD")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the weights, images and labels");
  app.add_flag("--graph", graph, "record the step as a CUDA graph after 3 ordinary steps and replay it (cuda only)");
  app.add_option("--fused-statistics", fused_statistics,
                 "on: each convolution computes its BatchNorm's statistics in its own kernel where the GPU "
                 "build can (CUTLASS, cuDNN); off: the BatchNorm's own pass")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_flag("--checkpoint-blocks", checkpoint_blocks,
               "keep only each residual block's input for backward and compute the block again there");
  app.add_flag("--memory-breakdown", memory_breakdown,
               "after the timed steps, one ordinary step with the allocator read after each phase (cuda only)");
  CLI::Option* reduce_flag =
      app.add_option("--reduce", reduce, "none, or the gradient allreduce after backward or overlapped with it")
          ->check(CLI::IsMember({"none", "after", "overlap"}));
  app.add_flag("--multi-node", multi_node,
               "run the step through parallel::MultiNodeOptimizer (--reduce after, the default, or overlap)");
  app.add_option("--zero", zero,
                 "ZeRO stage of --multi-node: 0 off; 1 keeps the momentum (and 16-bit runs' master weights) of "
                 "1/ranks of the parameters on each rank (reduce-scatter after backward, update, allgather); 2 "
                 "reduce-scatters bucket by bucket (during backward with --reduce overlap)")
      ->check(CLI::IsMember({0, 1, 2}));
  app.add_option("--buffer-sync", buffer_sync_arg,
                 "when --multi-node makes the ranks' buffers equal: off, before-use (the default; never within "
                 "this benchmark) or every-step")
      ->check(CLI::IsMember({"off", "before-use", "every-step"}));
  app.add_option("--communicator", communicator, "communicator of --reduce and --multi-node");
  app.add_option("--wire", wire_arg, "dtype the gradients travel in: float32, bfloat16 or float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  app.add_option("--bucket-mb", bucket_mb, "MiB of gradients per bucket")->check(CLI::PositiveNumber);
  app.add_option("--first-bucket-mb", first_bucket_mb, "MiB of the first bucket")->check(CLI::PositiveNumber);
  app.add_option("--profile-steps", profile_steps, "steps run at the end with a profiler's capture on")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    Device device;
    if (!flags.resolve("bench_resnet", device)) return 2;
    const bool cuda = device.is_cuda();
    if (iters == 0) iters = cuda ? 100 : 5;
    if (warmup < 0) warmup = cuda ? 10 : 1;
    const DType dtype = parse_dtype(dtype_arg);
    const bool nhwc = layout == "nhwc";
    // The combinations refused before any communicator exists, so that every rank stops alike.
    if (!multi_node && zero != 0) {
      std::fprintf(stderr, "bench_resnet: --zero %d shards MultiNodeOptimizer's state, so it needs --multi-node\n",
                   zero);
      return 2;
    }
    if (!multi_node && buffer_sync_arg != "before-use") {
      std::fprintf(stderr, "bench_resnet: --buffer-sync %s is MultiNodeOptimizer's, so it needs --multi-node\n",
                   buffer_sync_arg.c_str());
      return 2;
    }
    if (multi_node && reduce_flag->count() == 0) reduce = "after";
    if (multi_node && reduce == "none") {
      std::fprintf(stderr,
                   "bench_resnet: --multi-node averages the gradients, so it needs --reduce after or overlap, got "
                   "--reduce none\n");
      return 2;
    }
    if (zero == 1 && reduce == "overlap") {
      std::fprintf(stderr,
                   "bench_resnet: --zero 1 reduce-scatters after backward, so it needs --reduce after, got --reduce "
                   "overlap; --zero 2 reduce-scatters bucket by bucket during backward\n");
      return 2;
    }
    if (graph && multi_node && reduce == "overlap") {
      std::fprintf(stderr,
                   "bench_resnet: --graph records MultiNodeOptimizer's step only without overlap, so it needs "
                   "--reduce after, got --reduce overlap\n");
      return 2;
    }

    Generator gen(seed);
    models::ResNetOptions options;
    options.num_classes = classes;
    options.fused_statistics = fused_statistics == "on";
    options.checkpoint_blocks = checkpoint_blocks;
    const auto model = models::resnet(arch, options, gen);
    model->to(device);
    if (nhwc) nn::to_channels_last(*model);

    Tensor images = Tensor::uniform({batch, 3, image_size, image_size}, -1.f, 1.f, gen, device);
    if (nhwc) images = images.to_channels_last();
    images = images.to(dtype);  // the model's parameters follow at setup (mixed precision)
    const Variable x(images);
    std::vector<std::int32_t> labels_host(static_cast<std::size_t>(batch));
    for (auto& l : labels_host) l = static_cast<std::int32_t>(gen.below(static_cast<std::uint64_t>(classes)));
    const Tensor labels = Tensor::from_vector(labels_host, {batch}, device);

    // 16-bit runs compute in dtype on float32 master weights and float32 momentum
    // (optim::mixed_precision); float32 runs pass straight through.
    auto sgd = std::make_unique<optim::MomentumSGD>(lr, 0.9f);
    sgd->set_weight_decay(1e-4f);
    std::unique_ptr<optim::Optimizer> opt_ptr = optim::mixed_precision(std::move(sgd), dtype);
    std::shared_ptr<comm::Communicator> comm;
    const bool overlap = reduce == "overlap";
    const double mib = 1024.0 * 1024.0;
    const auto bucket_bytes = static_cast<std::size_t>(bucket_mb * mib);
    const auto first_bucket_bytes = static_cast<std::size_t>(first_bucket_mb * mib);
    if (reduce != "none") comm = comm::create_communicator(communicator, comm::CommOptions{parse_dtype(wire_arg)});
    // As the training examples build it: overlap and stage before setup(), which lays out the
    // shard. Stage 2 cuts its shards at the buckets whether or not they overlap backward.
    parallel::MultiNodeOptimizer* multi = nullptr;
    if (multi_node) {
      auto wrapped = parallel::create_multi_node_optimizer(std::move(opt_ptr), comm);
      wrapped->set_overlap({overlap, bucket_bytes, first_bucket_bytes});
      wrapped->set_zero_stage(zero);
      wrapped->set_buffer_sync(buffer_sync_arg == "off"          ? parallel::BufferSync::kOff
                               : buffer_sync_arg == "every-step" ? parallel::BufferSync::kEveryStep
                                                                 : parallel::BufferSync::kBeforeUse);
      multi = wrapped.get();
      opt_ptr = std::move(wrapped);
    }
    optim::Optimizer& opt = *opt_ptr;
    opt.setup(*model);
    if (graph && multi != nullptr && !opt.replay_refusal().empty()) {
      std::fprintf(stderr, "bench_resnet: --graph needs a step MultiNodeOptimizer can record, but %s\n",
                   opt.replay_refusal().c_str());
      return 2;
    }
    train::CapturedStep captured(
        opt, [&](const std::vector<Tensor>& in) { return softmax_cross_entropy((*model)(Variable(in[0])), in[1]); });
    std::unique_ptr<parallel::GradientReducer> reducer;
    double bucket_seconds = 0.0, exposed_seconds = 0.0;
    if (reduce != "none" && !multi_node) {
      reducer = std::make_unique<parallel::GradientReducer>(*model, comm);
      reducer->set_overlap({true, bucket_bytes, first_bucket_bytes});
      reducer->broadcast_parameters();
    }
    auto step = [&]() -> Variable {
      if (graph) return captured.update({images, labels});
      if (!reducer) return opt.update([&] { return softmax_cross_entropy((*model)(x), labels); });
      opt.zero_grad();
      Variable loss = softmax_cross_entropy((*model)(x), labels);
      if (overlap) reducer->begin_backward(nullptr, opt.gradient_ranges());
      opt.backward(loss);
      if (!overlap) reducer->begin_backward(nullptr, opt.gradient_ranges());
      const parallel::OverlapTimes t = reducer->finish_backward();
      bucket_seconds += t.total;
      exposed_seconds += t.exposed;
      opt.update();
      return loss;
    };
    if (graph && !cuda) {
      std::fprintf(stderr, "bench_resnet: --graph needs --device cuda\n");
      return 2;
    }
    if (graph && reducer) {
      std::fprintf(stderr, "bench_resnet: --graph records no GradientReducer step, so it needs --reduce none or "
                           "--multi-node, got --reduce %s\n", reduce.c_str());
      return 2;
    }
    if (graph && warmup < 4) warmup = 4;  // three ordinary steps, then the recording

    // A recorded step allocates its activations once, while it is recorded: its peak is that of
    // the recording and the replays, taken from just before the recording.
    const bench::StepTimes t = bench::timed_steps(
        device, warmup, iters, graph, step,
        [&] {
          if (graph) captured.settle();  // the last step's non-finite verdict, when it was deferred
        },
        [&] {
          bucket_seconds = exposed_seconds = 0.0;
          if (multi != nullptr) multi->timer().clear();
        });
    const double seconds = t.seconds;
    const std::size_t peak = t.peak_bytes, held = t.held_bytes;
    // The timed steps' phases only (the warm-up's were cleared); collective, so on every rank.
    profile::Summary phases;
    if (multi != nullptr) phases = multi->summary(0);

    if (memory_breakdown && cuda) {
      // Where one ordinary step's memory goes: what forward keeps for backward, and the peaks of
      // forward, backward and the update, each over what was allocated when the phase began.
      const auto mem = [&] { return cuda::memory_stats(device.index); };
      sync(device);
      const std::size_t before = mem().current;
      cuda::reset_peak(device.index);
      opt.zero_grad();
      Variable loss_var = softmax_cross_entropy((*model)(x), labels);
      sync(device);
      const std::size_t after_forward = mem().current, forward_peak = mem().peak;
      cuda::reset_peak(device.index);
      opt.backward(loss_var);
      sync(device);
      const std::size_t after_backward = mem().current, backward_peak = mem().peak;
      cuda::reset_peak(device.index);
      opt.update();
      loss_var = Variable();
      sync(device);
      std::printf("memory before_step=%zu after_forward=%zu forward_peak=%zu after_backward=%zu backward_peak=%zu "
                  "update_peak=%zu after_step=%zu\n",
                  before, after_forward, forward_peak, after_backward, backward_peak, mem().peak, mem().current);
    }

    // One more step whose loss is read, so that a broken run cannot pass as a fast one.
    const float loss = step().item();
    if (graph) captured.settle();
    bench::profiled_steps(device, profile_steps, step, [&] {
      if (graph) captured.settle();
    });
    const double step_s = seconds / iters;
    std::printf("arch=%s batch=%lld dtype=%s layout=%s graph=%d img_per_s=%.2f step_ms=%.3f peak_mem_bytes=%zu "
                "held_mem_bytes=%zu device=%s iters=%d loss=%.4f",
                arch.c_str(), static_cast<long long>(batch), dtype_name(dtype), layout.c_str(), graph ? 1 : 0,
                static_cast<double>(batch) / step_s, step_s * 1e3, peak, held, cuda ? "cuda" : "cpu", iters, loss);
    if (reducer)
      std::printf(" reduce=%s communicator=%s ranks=%d wire=%s buckets=%zu bucket_ms=%.3f exposed_ms=%.3f",
                  reduce.c_str(), communicator.c_str(), comm->size(), wire_arg.c_str(), reducer->buckets().size(),
                  bucket_seconds / iters * 1e3, exposed_seconds / iters * 1e3);
    if (multi != nullptr) {
      double buffers_seconds = 0.0;
      std::string phase_ms;
      for (const profile::PhaseSummary& p : phases.phases) {
        if (p.name == "buffers") buffers_seconds = p.mean;
        if (p.name.find('/') != std::string::npos) continue;  // sub-phases lie inside their phase
        char entry[96];
        std::snprintf(entry, sizeof entry, "%s%s:%.3f", phase_ms.empty() ? "" : ",", p.name.c_str(), p.mean * 1e3);
        phase_ms += entry;
      }
      std::printf(" reduce=%s communicator=%s ranks=%d rank=%d wire=%s multi_node=1 zero=%d buffer_sync=%s "
                  "optimizer_state_bytes=%lld buffers_ms=%.3f phase_ms=%s",
                  reduce.c_str(), communicator.c_str(), comm->size(), comm->rank(), wire_arg.c_str(),
                  multi->zero_stage(), buffer_sync_arg.c_str(), static_cast<long long>(multi->optimizer_state_bytes()),
                  buffers_seconds * 1e3, phase_ms.empty() ? "-" : phase_ms.c_str());
    }
    std::printf(" fused_statistics=%d%s\n", fused_statistics == "on" ? 1 : 0,
                checkpoint_blocks ? " checkpoint_blocks=1" : "");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_resnet: %s\n", e.what());
    return 1;
  }
}
