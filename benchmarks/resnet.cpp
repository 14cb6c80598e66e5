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
  std::string reduce = "none", communicator = "pure_nccl", wire_arg = "float32";
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
  app.add_flag("--memory-breakdown", memory_breakdown,
               "after the timed steps, one ordinary step with the allocator read after each phase (cuda only)");
  app.add_option("--reduce", reduce, "none, or the gradient allreduce after backward or overlapped with it")
      ->check(CLI::IsMember({"none", "after", "overlap"}));
  app.add_option("--communicator", communicator, "communicator of --reduce");
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

    Generator gen(seed);
    models::ResNetOptions options;
    options.num_classes = classes;
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
    const auto opt_ptr = optim::mixed_precision(std::move(sgd), dtype);
    optim::Optimizer& opt = *opt_ptr;
    opt.setup(*model);
    train::CapturedStep captured(
        opt, [&](const std::vector<Tensor>& in) { return softmax_cross_entropy((*model)(Variable(in[0])), in[1]); });
    std::shared_ptr<comm::Communicator> comm;
    std::unique_ptr<parallel::GradientReducer> reducer;
    const bool overlap = reduce == "overlap";
    double bucket_seconds = 0.0, exposed_seconds = 0.0;
    if (reduce != "none") {
      comm = comm::create_communicator(communicator, comm::CommOptions{parse_dtype(wire_arg)});
      reducer = std::make_unique<parallel::GradientReducer>(*model, comm);
      const double mib = 1024.0 * 1024.0;
      reducer->set_overlap(
          {true, static_cast<std::size_t>(bucket_mb * mib), static_cast<std::size_t>(first_bucket_mb * mib)});
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
      std::fprintf(stderr, "bench_resnet: --graph runs without --reduce\n");
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
        [&] { bucket_seconds = exposed_seconds = 0.0; });
    const double seconds = t.seconds;
    const std::size_t peak = t.peak_bytes, held = t.held_bytes;

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
    std::printf("\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_resnet: %s\n", e.what());
    return 1;
  }
}
