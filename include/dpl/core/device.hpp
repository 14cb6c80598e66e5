#pragma once
// Where a tensor's storage lives.

#include <cstdint>
#include <ostream>
#include <string>

namespace dpl {

enum class DeviceType : std::uint8_t { kCPU, kCUDA };

/// A device: the host, or CUDA GPU number `index`.
struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static constexpr Device cpu() { return Device{DeviceType::kCPU, 0}; }
  static constexpr Device cuda(int index = 0) { return Device{DeviceType::kCUDA, index}; }
  constexpr bool is_cpu() const { return type == DeviceType::kCPU; }
  constexpr bool is_cuda() const { return type == DeviceType::kCUDA; }
  /// "cpu" or "cuda:N".
  std::string str() const;

  friend constexpr bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
  friend constexpr bool operator!=(Device a, Device b) { return !(a == b); }
};

std::ostream& operator<<(std::ostream& os, Device d);

/// True when this build has the CUDA backend and at least one GPU answers. Never throws:
/// any error of the CUDA runtime (no driver, no device) reads as "no GPU".
bool cuda_is_available();
/// Number of usable CUDA devices; 0 without a CUDA build or without a GPU.
int cuda_device_count();

}  // namespace dpl
