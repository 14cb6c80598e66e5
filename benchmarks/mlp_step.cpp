// Training-step throughput of ChainerMN's MNIST model (MLP 784-1000-1000-10, Adam, softmax
// cross-entropy) on synthetic inputs that stay on the device, the same workload as the PyTorch
// peer's `torch_peer.py mlp`. Prints one key=value record:
//   impl=dpl what=mlp device=cuda bs=100 units=1000 graph=0 iters=2000 iters_per_s=... ms_per_iter=...
// --graph records the step as a CUDA graph after three ordinary steps and replays it
// (train::CapturedStep): one launch per step instead of one per kernel. --non-finite sets the
// optimizer's check (stop, the default as in train_mnist, reads a four-byte flag back each step;
// off reads nothing back, as the PyTorch peer).
#include <chrono>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "device_flags.hpp"

using dpl::bench::sync;

int main(int argc, char** argv) {
  CLI::App app{"dpl MNIST-MLP training step throughput"};
  dpl::bench::DeviceFlags flags;
  std::int64_t batch = 100, units = 1000;
  int iters = 0, warmup = 50;
  bool graph = false;
  std::string non_finite = "stop";
  flags.add_to(app);
  app.add_option("-b,--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--units", units, "hidden units")->check(CLI::PositiveNumber);
  app.add_option("--iters", iters, "timed iterations (default 2000 on cuda, 50 on cpu)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup", warmup, "untimed iterations first")->check(CLI::NonNegativeNumber);
  app.add_flag("--graph", graph, "record the step as a CUDA graph after 3 ordinary steps and replay it (cuda only)");
  app.add_option("--non-finite", non_finite, "the optimizer's non-finite check: stop, skip or off")
      ->check(CLI::IsMember({"stop", "skip", "off"}));
  CLI11_PARSE(app, argc, argv);

  try {
    dpl::Device device;
    if (!flags.resolve("bench_mlp_step", device)) return 2;
    const bool cuda = device.is_cuda();
    if (iters == 0) iters = cuda ? 2000 : 50;

    dpl::Generator gen(0);
    dpl::nn::MLP model(units, 784, 10, gen);
    model.to(device);
    dpl::optim::Adam opt(1e-3f);
    opt.set_non_finite_policy(non_finite == "off"    ? dpl::optim::NonFinitePolicy::kOff
                              : non_finite == "skip" ? dpl::optim::NonFinitePolicy::kSkip
                                                     : dpl::optim::NonFinitePolicy::kStop);
    opt.setup(model);

    // Inputs as the peer draws them: uniform pixels, random labels, resident on the device.
    const dpl::Variable x(dpl::Tensor::uniform({batch, 784}, 0.f, 1.f, gen, device));
    std::vector<std::int32_t> labels_host(static_cast<std::size_t>(batch));
    for (auto& l : labels_host) l = static_cast<std::int32_t>(gen.below(10));
    const dpl::Tensor labels = dpl::Tensor::from_vector(labels_host, {batch}, device);

    if (graph && !cuda) {
      std::fprintf(stderr, "bench_mlp_step: --graph needs --device cuda\n");
      return 2;
    }
    if (graph && warmup < 4) warmup = 4;  // three ordinary steps, then the recording
    dpl::train::CapturedStep captured(opt, [&](const std::vector<dpl::Tensor>& in) {
      return dpl::softmax_cross_entropy(model(dpl::Variable(in[0])), in[1]);
    });
    auto step = [&]() -> dpl::Variable {
      if (graph) return captured.update({x.data(), labels});
      return opt.update([&] { return dpl::softmax_cross_entropy(model(x), labels); });
    };

    for (int i = 0; i < warmup; ++i) step();
    sync(device);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) step();
    if (graph) captured.settle();  // the last step's non-finite verdict, when it was deferred
    sync(device);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // One more step whose loss is read, so that a broken run cannot pass as a fast one.
    const float loss = step().item();
    if (graph) captured.settle();
    const double per_iter = seconds / iters;
    std::printf("impl=dpl what=mlp device=%s bs=%lld units=%lld graph=%d non_finite=%s iters=%d iters_per_s=%.1f "
                "ms_per_iter=%.4f loss=%.4f\n",
                cuda ? "cuda" : "cpu", static_cast<long long>(batch), static_cast<long long>(units), graph ? 1 : 0,
                non_finite.c_str(), iters, 1.0 / per_iter, per_iter * 1e3, loss);
    if (cuda) {
      const auto s = dpl::cuda::memory_stats(device.index);
      std::printf("impl=dpl what=mlp_memory device=cuda current_bytes=%zu peak_bytes=%zu cached_bytes=%zu "
                  "driver_allocs=%llu\n",
                  s.current, s.peak, s.cached, static_cast<unsigned long long>(s.driver_allocs));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_mlp_step: %s\n", e.what());
    return 1;
  }
}
