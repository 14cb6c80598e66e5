#pragma once
// The MPI layer under the host communicators: MPI's lifecycle in this process, error checking,
// datatypes, communicator handles and the chunking that lifts MPI's int counts.

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "dpl/comm/agreement.hpp"
#include "dpl/core/dtype.hpp"
#include "dpl/core/error.hpp"

/// Throws dpl::Error("<what>: <MPI's error text>") unless code is MPI_SUCCESS. Our communicators
/// use MPI_ERRORS_RETURN, so MPI failures surface as exceptions (and, uncaught, abort the job).
#define DPL_MPI_CHECK(call, what) ::dpl::comm::detail::mpi_check((call), (what))

namespace dpl::comm::detail {

void mpi_check(int code, const std::string& what);

/// Initialises MPI (MPI_THREAD_MULTIPLE for the collective watchdog's thread, or
/// MPI_THREAD_SERIALIZED when DPL_COLLECTIVE_TIMEOUT=0) unless the program already has, and then arranges for
/// MPI_Finalize at a clean exit; an MPI the program initialised is left for it to finalise.
/// Installs the terminate handler that aborts the job. Throws when MPI has been finalised.
void ensure_mpi();

/// Whether MPI is initialised with at least MPI_THREAD_SERIALIZED (a program that initialised
/// MPI itself may have asked for less).
bool serialized_threads();

/// Collective over MPI_COMM_WORLD, and the same call whatever the rank asked for: checks that
/// every rank passed the same `request` (the communicator's name, options and environment)
/// before any algorithm-specific collective could hang on a mismatch. One allgather of a stable
/// hash; only when they differ, the requests are gathered too, and every rank throws the same
/// dpl::Error naming each setting that differs and the ranks' values. Requires ensure_mpi().
void check_same_request(const std::vector<NamedValue>& request);

/// The MPI datatype that carries dtype. 16-bit types map to a 2-byte integer type: fine for
/// moving data, never used for reductions (the checks refuse them first).
MPI_Datatype mpi_datatype(DType dtype);

/// The most elements one MPI call carries: INT_MAX (MPI's count type), or less where a test
/// lowered it (test_hooks::set_max_count).
std::int64_t max_count();

/// MPI_TAG_UB of MPI_COMM_WORLD: the largest tag send and recv accept.
int tag_upper_bound();

/// Calls f(offset, count) over [0, n) in pieces of at most max_count() elements, in order.
template <typename F>
void for_each_chunk(std::int64_t n, F&& f) {
  const std::int64_t step = max_count();
  for (std::int64_t off = 0; off < n; off += step) f(off, static_cast<int>(std::min(step, n - off)));
}

/// Owns one MPI communicator and frees it, unless MPI has been finalised by then (a communicator
/// held in a static can outlive MPI_Finalize).
class CommHandle {
 public:
  CommHandle() = default;
  explicit CommHandle(MPI_Comm c) : comm_(c) {}
  CommHandle(CommHandle&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  CommHandle& operator=(CommHandle&& o) noexcept;
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  ~CommHandle() { reset(); }

  MPI_Comm get() const { return comm_; }
  void reset() noexcept;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace dpl::comm::detail
