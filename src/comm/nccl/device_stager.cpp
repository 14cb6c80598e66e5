#include "comm/nccl/device_stager.hpp"

#include <algorithm>
#include <climits>

#include "backend/cuda/comm_interop.hpp"
#include "comm/environment.hpp"
#include "comm/staging_pipeline.hpp"
#include "dpl/core/clock.hpp"
#include "dpl/core/settings.hpp"

namespace dpl::comm::detail {

using backend::comm_interop::DeviceGuard;

DeviceStager::DeviceStager(int device) : device_(device) {
  chunk_bytes_ = static_cast<std::size_t>(settings().staging_chunk_bytes);
  slots_ = settings().staging_slots;
  // Chunks hold whole elements of every dtype (8 bytes at most).
  chunk_bytes_ = std::max<std::size_t>(8, chunk_bytes_ / 8 * 8);
}

DeviceStager::~DeviceStager() {
  // Runs at exit too, possibly after the CUDA runtime has gone: errors are ignored.
  if (pinned_ == nullptr) return;
  cudaSetDevice(device_);
  cudaStreamSynchronize(d2h_);
  cudaStreamSynchronize(h2d_);
  for (int s = 0; s < slots_; ++s) {
    cudaEventDestroy(in_done_[s]);
    cudaEventDestroy(out_done_[s]);
  }
  delete[] in_done_;
  delete[] out_done_;
  cudaEventDestroy(ready_);
  cudaEventDestroy(done_);
  cudaStreamDestroy(d2h_);
  cudaStreamDestroy(h2d_);
  cudaFreeHost(pinned_);
}

void DeviceStager::ensure_buffers() {
  if (pinned_ != nullptr) return;
  DeviceGuard guard(device_);
  DPL_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pinned_), chunk_bytes_ * static_cast<std::size_t>(slots_),
                               cudaHostAllocPortable));
  DPL_CUDA_CHECK(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking));
  DPL_CUDA_CHECK(cudaStreamCreateWithFlags(&h2d_, cudaStreamNonBlocking));
  DPL_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  DPL_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  in_done_ = new cudaEvent_t[static_cast<std::size_t>(slots_)];
  out_done_ = new cudaEvent_t[static_cast<std::size_t>(slots_)];
  for (int s = 0; s < slots_; ++s) {
    DPL_CUDA_CHECK(cudaEventCreateWithFlags(&in_done_[s], cudaEventDisableTiming));
    DPL_CUDA_CHECK(cudaEventCreateWithFlags(&out_done_[s], cudaEventDisableTiming));
  }
}

double DeviceStager::run(void* data, std::int64_t n, std::size_t esize, cudaStream_t producer,
                         const std::function<void(void* host, std::int64_t count)>& reduce,
                         const StagingEvents& events) {
  ensure_buffers();
  DeviceGuard guard(device_);
  // Both copy streams start after the producer: the copies out write into the buffer too.
  DPL_CUDA_CHECK(cudaEventRecord(ready_, producer));
  DPL_CUDA_CHECK(cudaStreamWaitEvent(d2h_, ready_, 0));
  DPL_CUDA_CHECK(cudaStreamWaitEvent(h2d_, ready_, 0));
  if (events.d2h_begin) DPL_CUDA_CHECK(cudaEventRecord(events.d2h_begin, d2h_));
  if (events.h2d_begin) DPL_CUDA_CHECK(cudaEventRecord(events.h2d_begin, h2d_));

  const std::int64_t per_chunk = std::min<std::int64_t>(static_cast<std::int64_t>(chunk_bytes_ / esize), INT_MAX);
  const std::int64_t chunks = (n + per_chunk - 1) / per_chunk;
  auto count_of = [&](std::int64_t c) { return std::min(per_chunk, n - c * per_chunk); };
  auto dev_at = [&](std::int64_t c) { return static_cast<char*>(data) + static_cast<std::size_t>(c * per_chunk) * esize; };
  auto slot_at = [&](int s) { return pinned_ + static_cast<std::size_t>(s) * chunk_bytes_; };
  double reduce_seconds = 0.0;

  StagingSteps steps;
  steps.start_in = [&](std::int64_t c, int s) {
    DPL_CUDA_CHECK(cudaMemcpyAsync(slot_at(s), dev_at(c), static_cast<std::size_t>(count_of(c)) * esize,
                                   cudaMemcpyDeviceToHost, d2h_));
    DPL_CUDA_CHECK(cudaEventRecord(in_done_[s], d2h_));
  };
  steps.wait_in = [&](std::int64_t, int s) { DPL_CUDA_CHECK(cudaEventSynchronize(in_done_[s])); };
  steps.reduce = [&](std::int64_t c, int s) {
    const double t0 = now_seconds();
    reduce(slot_at(s), count_of(c));
    reduce_seconds += now_seconds() - t0;
  };
  steps.start_out = [&](std::int64_t c, int s) {
    DPL_CUDA_CHECK(cudaMemcpyAsync(dev_at(c), slot_at(s), static_cast<std::size_t>(count_of(c)) * esize,
                                   cudaMemcpyHostToDevice, h2d_));
    DPL_CUDA_CHECK(cudaEventRecord(out_done_[s], h2d_));
  };
  steps.wait_out = [&](int s) { DPL_CUDA_CHECK(cudaEventSynchronize(out_done_[s])); };
  run_staging_pipeline(chunks, slots_, steps);

  if (events.d2h_end) DPL_CUDA_CHECK(cudaEventRecord(events.d2h_end, d2h_));
  if (events.h2d_end) DPL_CUDA_CHECK(cudaEventRecord(events.h2d_end, h2d_));
  DPL_CUDA_CHECK(cudaEventRecord(done_, h2d_));
  // The next run's first copies in must not overwrite a slot whose copy out is still pending.
  DPL_CUDA_CHECK(cudaStreamWaitEvent(d2h_, done_, 0));
  return reduce_seconds;
}

}  // namespace dpl::comm::detail
