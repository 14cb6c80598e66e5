#pragma once
// What the throughput benchmarks share: the device flags (--device, -g/--gpu, --threads), picking
// the device from them, and the device synchronisation their clocks rely on.

#include <chrono>
#include <cstddef>
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

/// What timed_steps measured: the seconds of the timed steps, and the caching allocator's bytes
/// held between steps and at the peak of the timed steps (0 on the CPU).
struct StepTimes {
  double seconds = 0.0;
  std::size_t held_bytes = 0, peak_bytes = 0;
};

/// Runs `warmup` untimed steps, then `iters` timed ones back to back, synchronising the device only
/// around them. With `recorded` (a train::CapturedStep that records its fourth step), the peak is
/// taken from just before the recording, which allocates the replays' memory once. `settle` runs
/// after the timed steps, before the last synchronisation (a recorded step's deferred verdict),
/// and `after_warmup` between the two loops (to reset a benchmark's own counters).
template <typename Step, typename Settle, typename AfterWarmup>
StepTimes timed_steps(Device device, int warmup, int iters, bool recorded, Step&& step, Settle&& settle,
                      AfterWarmup&& after_warmup) {
  const bool on_gpu = device.is_cuda();
  for (int i = 0; i < warmup; ++i) {
    if (recorded && i == 3) {
      sync(device);
      cuda::reset_peak(device.index);
    }
    step();
  }
  sync(device);
  StepTimes out;
  out.held_bytes = on_gpu ? cuda::memory_stats(device.index).current : 0;
  if (on_gpu && !recorded) cuda::reset_peak(device.index);
  after_warmup();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) step();
  settle();
  sync(device);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.peak_bytes = on_gpu ? cuda::memory_stats(device.index).peak : 0;
  return out;
}

/// Runs `steps` more steps with a profiler's capture on (cuda::profiler_start/stop), so that a
/// kernel profile (scripts/gpu_kernel_profile.sh) holds those steps and nothing else. `settle`
/// runs after them, as in timed_steps. Nothing happens for steps <= 0.
template <typename Step, typename Settle>
void profiled_steps(Device device, int steps, Step&& step, Settle&& settle) {
  if (steps <= 0) return;
  sync(device);
  cuda::profiler_start();
  for (int i = 0; i < steps; ++i) step();
  settle();
  sync(device);
  cuda::profiler_stop();
}

}  // namespace dpl::bench
