// The public CUDA API (dpl/core/cuda.hpp): argument checks and device selection here, the work
// in the backend (backend/cuda_api.hpp), which in a build without CUDA reports no device.
#include "dpl/core/cuda.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda_api.hpp"
#include "dpl/config.hpp"
#include "dpl/core/device.hpp"
#include "dpl/core/error.hpp"
#include "dpl/core/settings.hpp"

namespace dpl {

int cuda_device_count() { return backend::cuda_api::device_count(); }

namespace cuda {

namespace {
void check_device(int device, const char* what) {
  DPL_CHECK(DPL_WITH_CUDA, "cuda::", what, ": ", backend::kNoCudaBackend);
  const int n = cuda_device_count();
  DPL_CHECK(n > 0, "cuda::", what, ": device cuda:", device, " was requested, but no GPU is available "
            "(the CUDA runtime reports none, or the driver is missing or too old)");
  DPL_CHECK(device >= 0 && device < n, "cuda::", what, ": device cuda:", device, " does not exist; this machine has ",
            n, " GPU(s), cuda:0 to cuda:", n - 1);
}
}  // namespace

MemoryStats memory_stats(int device) {
  check_device(device, "memory_stats");
  return backend::cuda_api::memory_stats(device);
}

std::size_t available_memory(int device) {
  check_device(device, "available_memory");
  return backend::cuda_api::driver_free_memory(device) + backend::cuda_api::memory_stats(device).cached;
}

void reset_peak(int device) {
  check_device(device, "reset_peak");
  backend::cuda_api::reset_peak(device);
}

void empty_cache(int device) {
  check_device(device, "empty_cache");
  backend::cuda_api::empty_cache(device);
}

bool caching_enabled() { return backend::cuda_api::caching_enabled(); }

void set_device(int device) {
  check_device(device, "set_device");
  backend::cuda_api::set_device(device);
}

int current_device() { return cuda_device_count() == 0 ? -1 : backend::cuda_api::current_device(); }

void synchronize(int device) {
  check_device(device, "synchronize");
  backend::cuda_api::synchronize(device);
}

int select_device_for_local_rank(int intra_rank) {
  DPL_CHECK(intra_rank >= 0, "cuda::select_device_for_local_rank: expected an intra-node rank >= 0, got ",
            intra_rank);
  const int n = cuda_device_count();
  if (n == 0) return -1;
  int device = intra_rank % n;
  if (const std::vector<int> list = settings().cuda_devices; !list.empty()) {
    device = list[static_cast<std::size_t>(intra_rank) % list.size()];
    DPL_CHECK(device < n, "cuda::select_device_for_local_rank: DPL_CUDA_DEVICE names cuda:", device,
              " but this machine has ", n, " GPU(s)");
  }
  backend::cuda_api::set_device(device);
  return device;
}

void set_allow_tf32(bool on) { backend::cuda_api::set_allow_tf32(on); }

bool allow_tf32() { return backend::cuda_api::allow_tf32(); }

void* pinned_allocate(std::size_t nbytes) {
  DPL_CHECK(DPL_WITH_CUDA, "cuda::pinned_allocate: ", backend::kNoCudaBackend);
  return backend::cuda_api::pinned_allocate(nbytes);
}

void pinned_free(void* p) { backend::cuda_api::pinned_free(p); }

MemoryStats pinned_stats() { return backend::cuda_api::pinned_stats(); }

namespace {
backend::cuda_api::RecordedGraph* as_graph(void* p) { return static_cast<backend::cuda_api::RecordedGraph*>(p); }
}  // namespace

Graph::~Graph() { reset(); }

Graph::Graph(Graph&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    reset();
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

void Graph::reset() noexcept {
  backend::cuda_api::graph_destroy(as_graph(handle_));
  handle_ = nullptr;
}

void Graph::capture(int device, const std::function<void()>& work) {
  DPL_CHECK(static_cast<bool>(work), "cuda::Graph::capture: expected the work to record, got an empty function");
  check_device(device, "Graph::capture");
  reset();
  handle_ = backend::cuda_api::graph_capture(device, work);
}

void Graph::replay() {
  DPL_CHECK(handle_ != nullptr, "cuda::Graph::replay: nothing was recorded (call capture() first)");
  backend::cuda_api::graph_replay(as_graph(handle_));
}

int Graph::device() const { return backend::cuda_api::graph_device(as_graph(handle_)); }

void profiler_start() {
  if (cuda_device_count() > 0) backend::cuda_api::profiler_capture(true);
}

void profiler_stop() {
  if (cuda_device_count() > 0) backend::cuda_api::profiler_capture(false);
}

bool is_capturing(int device) { return cuda_device_count() > 0 && backend::cuda_api::is_capturing(device); }

}  // namespace cuda
}  // namespace dpl
