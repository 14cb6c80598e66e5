#pragma once
// A block of memory on one device, shared by every tensor that views it.

#include <cstddef>
#include <functional>
#include <memory>

#include "dpl/core/device.hpp"

namespace dpl {

/// Owns nbytes of memory on a device and frees it through its deleter when the last tensor
/// that views it goes away. Host blocks are 64-byte aligned.
class Storage {
 public:
  using Deleter = std::function<void(void*)>;

  Storage(void* data, std::size_t nbytes, Device device, Deleter deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  /// Allocates nbytes on device through that device's allocator. Throws dpl::Error when the
  /// device is not available in this build or the allocation fails.
  static std::shared_ptr<Storage> allocate(std::size_t nbytes, Device device);

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  std::size_t nbytes_;
  Device device_;
  Deleter deleter_;
};

/// Host memory alignment in bytes (a cache line; also the widest vector register).
inline constexpr std::size_t kHostAlignment = 64;

}  // namespace dpl
