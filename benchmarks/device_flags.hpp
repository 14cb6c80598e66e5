#pragma once
// What the throughput benchmarks share: the device flags (--device, -g/--gpu, --threads), picking
// the device from them, and the device synchronisation their clocks rely on.

#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "dpl/core/cuda.hpp"
#include "dpl/dpl.hpp"

namespace dpl::bench {

/// The device a benchmark runs on, as its flags give it.
struct DeviceFlags {
  std::string device = "cuda";
  int gpu = 0;
  int threads = 0;

  /// Adds --device (cpu or cuda), -g/--gpu and --threads to app.
  void add_to(CLI::App& app) {
    app.add_option("--device", device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
    app.add_option("-g,--gpu", gpu, "GPU index for --device cuda")->check(CLI::NonNegativeNumber);
    app.add_option("--threads", threads, "host threads for --device cpu (default: dpl's default)")
        ->check(CLI::NonNegativeNumber);
  }
  bool cuda() const { return device == "cuda"; }
  /// Applies --threads and sets `out` to the chosen device (made current when it is a GPU).
  /// Returns false, after saying so on stderr under `program`'s name, when --device cuda was asked
  /// for and no GPU is available.
  bool resolve(const char* program, Device& out) const {
    if (cuda() && !cuda_is_available()) {
      std::fprintf(stderr, "%s: --device cuda was requested but no GPU is available\n", program);
      return false;
    }
    if (threads > 0) set_num_threads(threads);
    out = cuda() ? Device::cuda(gpu) : Device::cpu();
    if (cuda()) cuda::set_device(gpu);
    return true;
  }
};

/// Waits for the device's queued work, so that the clock reads the time the work took, not the
/// time it took to queue it.
inline void sync(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

}  // namespace dpl::bench
