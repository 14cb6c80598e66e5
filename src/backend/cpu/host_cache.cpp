#include "backend/cpu/host_cache.hpp"

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "dpl/core/error.hpp"
#include "dpl/core/settings.hpp"
#include "dpl/tensor/storage.hpp"

namespace dpl::backend {

namespace {
constexpr std::size_t kPage = 4096;

struct HostCache {
  std::mutex mutex;
  std::unordered_map<void*, std::size_t> sizes;               // live and cached large blocks
  std::unordered_map<std::size_t, std::vector<void*>> free;  // by rounded size
  std::size_t cached = 0;
  // DPL_CPU_NO_CACHING=1 sends every block back to the system, for memory checkers.
  const bool enabled = settings().cpu_caching;
};

HostCache& cache() {
  // Leaked on purpose: tensors freed during static destruction must still find it.
  static HostCache* c = new HostCache();
  return *c;
}

void* system_allocate(std::size_t bytes) {
  void* p = std::aligned_alloc(kHostAlignment, bytes);
  DPL_CHECK(p != nullptr, "host allocation of ", bytes, " bytes failed");
  return p;
}
}  // namespace

void* host_cache_allocate(std::size_t nbytes) {
  if (nbytes < kHostCacheMinBytes) {
    const std::size_t size = ((nbytes + kHostAlignment - 1) / kHostAlignment) * kHostAlignment;
    return system_allocate(size == 0 ? kHostAlignment : size);
  }
  const std::size_t size = (nbytes + kPage - 1) / kPage * kPage;
  HostCache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.free.find(size);
    if (it != c.free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.cached -= size;
      return p;
    }
  }
  void* p = system_allocate(size);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.sizes.emplace(p, size);
  return p;
}

void host_cache_free(void* p) {
  if (!p) return;
  HostCache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.sizes.find(p);
    if (it != c.sizes.end()) {
      const std::size_t size = it->second;
      if (c.enabled && c.cached + size <= kHostCacheMaxBytes) {
        c.free[size].push_back(p);
        c.cached += size;
        return;
      }
      c.sizes.erase(it);
    }
  }
  std::free(p);
}

}  // namespace dpl::backend
