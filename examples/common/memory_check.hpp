#pragma once
// Before training: does the model and its batch fit the memory of this rank's device? A run that
// does not fit used to train until an allocation failed (train_mnist -u 65536 needs about 69 GB
// per rank); this refuses it up front, naming the estimate, what is available and the flags that
// change it.

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "dpl/core/cuda.hpp"
#include "dpl/core/device.hpp"
#include "dpl/core/error.hpp"

namespace dpl::examples {

/// What one training step holds, in bytes: an estimate, not a measurement. It counts the
/// parameters, their gradients, the optimizer's state (e.g. Adam's two moments) and the
/// activations one step keeps for backward together with their gradients; it leaves out the
/// allocator's rounding and caching, the communicators' buffers, the data set and the loader's
/// batches, and library workspaces, which is why a run is refused only when the estimate alone
/// exceeds what is available.
struct MemoryEstimate {
  std::uint64_t parameters = 0;
  std::uint64_t gradients = 0;
  std::uint64_t optimizer_state = 0;
  std::uint64_t activations = 0;
  /// The sum of the four.
  std::uint64_t total() const { return parameters + gradients + optimizer_state + activations; }
};

/// Bytes as "12.3 GB" (decimal gigabytes, one decimal), or "45.6 MB" below a gigabyte.
inline std::string format_bytes(std::uint64_t bytes) {
  char text[32];
  if (bytes >= 1000000000ull) std::snprintf(text, sizeof text, "%.1f GB", static_cast<double>(bytes) / 1e9);
  else std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

/// The host memory a new allocation can get: MemAvailable of /proc/meminfo (free memory plus
/// what the kernel can reclaim), or, where that file is missing, the free physical pages.
inline std::uint64_t host_available_memory() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

/// Refuses a run whose estimate exceeds what device has: on the host, MemAvailable shared by the
/// `processes_on_host` ranks of this machine (each needs the estimate); on a GPU, its
/// cuda::available_memory. Throws dpl::Error "<program>: the model and batch need about <N> per
/// process (an estimate: parameters ..., gradients ..., optimizer state ..., activations of one
/// step ...), but <where> has <M> available[ for <k> processes]; <advice>". An available amount
/// of 0 (unknown) refuses nothing.
inline void check_memory_fits(const MemoryEstimate& need, const Device& device, int processes_on_host,
                              const std::string& program, const std::string& advice) {
  const bool host = device.is_cpu();
  const std::uint64_t available = host ? host_available_memory() : cuda::available_memory(device.index);
  const std::uint64_t sharing = host ? static_cast<std::uint64_t>(processes_on_host > 0 ? processes_on_host : 1) : 1;
  if (available == 0 || need.total() * sharing <= available) return;
  DPL_FAIL(program, ": the model and batch need about ", format_bytes(need.total()),
           " per process (an estimate: parameters ", format_bytes(need.parameters), ", gradients ",
           format_bytes(need.gradients), ", optimizer state ", format_bytes(need.optimizer_state),
           ", activations of one step ", format_bytes(need.activations), "), but ",
           host ? std::string("the host") : "GPU cuda:" + std::to_string(device.index), " has ",
           format_bytes(available), " available",
           sharing > 1 ? " for " + std::to_string(sharing) + " processes" : std::string(), "; ", advice);
}

}  // namespace dpl::examples
