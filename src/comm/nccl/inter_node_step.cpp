#include "comm/nccl/inter_node_step.hpp"

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // MPIX_Query_cuda_support, where the MPI has it
#endif

#include <cstdlib>
#include <cstring>

#include "backend/cuda/comm_interop.hpp"
#include "comm/checks.hpp"
#include "comm/mpi/mpi_runtime.hpp"
#include "comm/nccl/half_sum_ops.hpp"
#include "dpl/core/clock.hpp"
#include "dpl/core/settings.hpp"

namespace dpl::comm::detail {

namespace {

bool mpi_cuda_aware() {
  if (const auto forced = settings().mpi_cuda_aware) return *forced;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

}  // namespace

InterNodeStep::InterNodeStep(std::string comm_name) : name_(std::move(comm_name)), cuda_aware_(mpi_cuda_aware()) {}

double InterNodeStep::run(MPI_Comm group, void* data, std::int64_t n, DType dtype, int device, cudaStream_t stream,
                          PhaseEvents& events) {
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Op op = mpi_sum_op(dtype);
  const std::string what = what_call("allreduce", name_) + ": MPI_Allreduce";
  auto reduce = [&](void* p, std::int64_t count) {
    for_each_chunk(count, [&](std::int64_t off, int c) {
      DPL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(p) + off * static_cast<std::int64_t>(dtype_size(dtype)),
                                  c, type, op, group),
                    what);
    });
  };
  if (cuda_aware_ && op == MPI_SUM) {
    events.record(kD2hBegin, stream);
    events.record(kD2hEnd, stream);
    DPL_CUDA_CHECK(cudaStreamSynchronize(stream));  // MPI reads what our stream wrote
    const double t0 = now_seconds();
    reduce(data, n);
    const double s = now_seconds() - t0;
    events.record(kH2dBegin, stream);
    events.record(kH2dEnd, stream);
    return s;
  }
  if (!stager_) stager_ = std::make_unique<DeviceStager>(device);
  const StagingEvents ev{events.event(kD2hBegin), events.event(kD2hEnd), events.event(kH2dBegin),
                         events.event(kH2dEnd)};
  const double s = stager_->run(data, n, dtype_size(dtype), stream, reduce, ev);
  DPL_CUDA_CHECK(cudaStreamWaitEvent(stream, stager_->done(), 0));
  return s;
}

}  // namespace dpl::comm::detail
