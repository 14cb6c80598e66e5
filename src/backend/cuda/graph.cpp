// CUDA graphs: the work a function queues on a device's compute stream, recorded by stream
// capture and replayed with one launch. The caching allocator serves the recording from a pool
// of its own (caching_allocator.hpp), so that the addresses the graph's kernels use stay theirs.
#include <exception>
#include <string>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda_api.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend::cuda_api {

struct RecordedGraph {
  int device = -1;
  int pool = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

namespace {
// Ends a recording that failed: the stream leaves capture mode and the partial graph goes.
void abandon_capture(cudaStream_t stream) {
  cudaGraph_t partial = nullptr;
  cudaStreamEndCapture(stream, &partial);
  if (partial != nullptr) cudaGraphDestroy(partial);
  cudaGetLastError();
}
}  // namespace

RecordedGraph* graph_capture(int device, const std::function<void()>& work) {
  CudaDevice& d = CudaDevice::get(device);
  cuda_detail::DeviceGuard guard(device);
  cuda_detail::CachingAllocator& allocator = d.allocator();
  const int pool = allocator.open_private_pool();
  allocator.route_to_pool(pool);
  const cudaStream_t stream = d.stream();
  // Relaxed: threads that are not recording (image loaders allocating pinned memory) must not
  // invalidate the recording; a wait for the recorded stream itself still fails it.
  cudaError_t err = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
  if (err != cudaSuccess) {
    cudaGetLastError();
    allocator.stop_routing();
    allocator.close_private_pool(pool);
    DPL_FAIL("cuda:", device, ": could not start recording a CUDA graph (", cudaGetErrorString(err), ")");
  }
  try {
    work();
  } catch (const std::exception& e) {
    abandon_capture(stream);
    allocator.stop_routing();
    allocator.close_private_pool(pool);
    DPL_FAIL("cuda:", device, ": recording a CUDA graph failed: ", e.what(),
             " (a recorded step may not wait for the device, read a value back or copy from pageable host memory)");
  }
  cudaGraph_t graph = nullptr;
  err = cudaStreamEndCapture(stream, &graph);
  allocator.stop_routing();
  if (err != cudaSuccess || graph == nullptr) {
    cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    allocator.close_private_pool(pool);
    DPL_FAIL("cuda:", device, ": the CUDA graph recording was invalidated (", cudaGetErrorString(err),
             "): the recorded work waited for the device, read a value back, or another thread used the stream");
  }
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiate(&exec, graph, 0);
  if (err != cudaSuccess) {
    cudaGetLastError();
    cudaGraphDestroy(graph);
    allocator.close_private_pool(pool);
    DPL_FAIL("cuda:", device, ": could not instantiate the recorded CUDA graph (", cudaGetErrorString(err), ")");
  }
  return new RecordedGraph{device, pool, graph, exec};
}

void graph_replay(RecordedGraph* graph) {
  DPL_CHECK(graph != nullptr, "cuda::Graph::replay: nothing was recorded");
  CudaDevice& d = CudaDevice::get(graph->device);
  cuda_detail::DeviceGuard guard(graph->device);
  DPL_CUDA_CHECK(cudaGraphLaunch(graph->exec, d.stream()));
}

void graph_destroy(RecordedGraph* graph) noexcept {
  if (graph == nullptr) return;
  CudaDevice* d = CudaDevice::get_if_created(graph->device);
  if (d != nullptr) {
    int previous = -1;
    cudaGetDevice(&previous);
    if (previous != graph->device) cudaSetDevice(graph->device);
    // A replay may still be queued: its kernels use the pool's blocks until they finish.
    cudaStreamSynchronize(d->stream());
    cudaGraphExecDestroy(graph->exec);
    cudaGraphDestroy(graph->graph);
    d->allocator().close_private_pool(graph->pool);
    if (previous >= 0 && previous != graph->device) cudaSetDevice(previous);
    cudaGetLastError();
  }
  delete graph;
}

int graph_device(const RecordedGraph* graph) { return graph == nullptr ? -1 : graph->device; }

bool is_capturing(int device) {
  CudaDevice* d = CudaDevice::get_if_created(device);
  if (d == nullptr) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(d->stream(), &status) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return status == cudaStreamCaptureStatusActive;
}

}  // namespace dpl::backend::cuda_api
