// One optimizer step over ResNet-50's parameters (models::resnet("resnet50"): 161 tensors,
// 25.6 M float32 elements; --groups puts them in two parameter groups), the work of
// `actual_optimizer.update(arena)` in a training step:
// gradients are fixed random values in the arena and only the update is timed (median of per-step
// times with a device synchronisation after each, as torch_optimizer_peer.py times PyTorch's
// fused and foreach AdamW on the same shapes). Prints one key=value record:
//   impl=dpl what=optimizer_step optimizer=adamw groups=none arch=resnet50 device=cuda tensors=161
//   elements=25557032 iters=200
//   ms_per_step=... gb_per_s=...
// gb_per_s counts the bytes the rule must move (AdamW: param, grad, m and v read, param, m and v
// written: 28 bytes per element). The non-finite check is off by default, as in the peer.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "device_flags.hpp"

using dpl::bench::sync;

namespace {

std::unique_ptr<dpl::optim::Optimizer> make(const std::string& name) {
  namespace optim = dpl::optim;
  if (name == "adamw") return std::make_unique<optim::AdamW>(optim::AdamWOptions(1e-3f));
  if (name == "adam") return std::make_unique<optim::Adam>(1e-3f);
  if (name == "lamb") return std::make_unique<optim::LAMB>(optim::LAMBOptions(1e-3f));
  if (name == "lars") return std::make_unique<optim::LARS>(optim::LARSOptions(0.1f).exclude_one_dimensional());
  if (name == "rmsprop") return std::make_unique<optim::RMSprop>(optim::RMSpropOptions(1e-2f));
  if (name == "adagrad") return std::make_unique<optim::Adagrad>(optim::AdagradOptions(1e-2f));
  return std::make_unique<optim::MomentumSGD>(0.1f, 0.9f);
}

// Bytes each rule reads and writes per element (float32).
double bytes_per_element(const std::string& name) {
  if (name == "adamw" || name == "adam") return 28.0;
  if (name == "lamb") return 44.0;  // first pass: p, g, m, v read, m, v written; second: p, m, v read, p written
  if (name == "lars") return 28.0;  // norms: p, g read; update: p, g, velocity read, p, velocity written
  if (name == "rmsprop" || name == "adagrad") return 20.0;
  return 20.0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpl optimizer step over ResNet-50's parameters"};
  dpl::bench::DeviceFlags flags;
  std::string optimizer = "adamw", arch = "resnet50", non_finite = "off", groups = "none";
  int iters = 0, warmup = 20;
  flags.add_to(app);
  app.add_option("--optimizer", optimizer, "the update rule")
      ->check(CLI::IsMember({"adamw", "adam", "lamb", "lars", "rmsprop", "adagrad", "momentum"}));
  app.add_option("-a,--arch", arch, "whose parameters (a models::resnet architecture)");
  app.add_option("--iters", iters, "timed steps (default 200 on cuda, 5 on cpu)")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--non-finite", non_finite, "the optimizer's non-finite check: stop, skip or off")
      ->check(CLI::IsMember({"stop", "skip", "off"}));
  app.add_option("--groups", groups,
                 "parameter groups: none, or no-decay-1d (weight decay 0.01, none on the 1-D parameters, which "
                 "interleave with the others: one update range per run of one group)")
      ->check(CLI::IsMember({"none", "no-decay-1d"}));
  CLI11_PARSE(app, argc, argv);

  try {
    dpl::Device device;
    if (!flags.resolve("bench_optimizer_step", device)) return 2;
    const bool cuda = device.is_cuda();
    if (iters == 0) iters = cuda ? 200 : 5;

    std::shared_ptr<dpl::models::ResNet> model = dpl::models::resnet(arch);
    model->to(device);
    std::unique_ptr<dpl::optim::Optimizer> opt = make(optimizer);
    opt->set_non_finite_policy(non_finite == "off"    ? dpl::optim::NonFinitePolicy::kOff
                               : non_finite == "skip" ? dpl::optim::NonFinitePolicy::kSkip
                                                      : dpl::optim::NonFinitePolicy::kStop);
    if (groups == "no-decay-1d") {
      opt->set_weight_decay(0.01f);
      opt->add_param_group(dpl::optim::ParamGroup::one_dimensional("no decay").weight_decay(0.f));
    }
    opt->setup(*model);
    const dpl::nn::ParameterArena& arena = model->arena();
    dpl::Generator gen(0);
    dpl::Tensor grads = arena.grads();
    // Small gradients, so that thousands of steps leave the weights in range.
    for (const dpl::nn::ArenaEntry& e : arena.entries())
      grads.narrow(0, e.offset, e.numel).copy_(dpl::Tensor::uniform({e.numel}, -1e-3f, 1e-3f, gen, device));
    std::int64_t elements = 0;
    for (const dpl::nn::ArenaEntry& e : arena.entries()) elements += e.numel;

    for (int i = 0; i < warmup; ++i) opt->update();
    sync(device);
    std::vector<double> ms;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      opt->update();
      sync(device);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    const double gb_per_s = bytes_per_element(optimizer) * static_cast<double>(elements) / (median * 1e6);
    std::printf("impl=dpl what=optimizer_step optimizer=%s groups=%s arch=%s device=%s tensors=%zu elements=%lld "
                "iters=%d ms_per_step=%.4f gb_per_s=%.1f\n",
                optimizer.c_str(), groups.c_str(), arch.c_str(), cuda ? "cuda" : "cpu", arena.entries().size(),
                static_cast<long long>(elements), iters, median, gb_per_s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_optimizer_step: %s\n", e.what());
    return 1;
  }
}
