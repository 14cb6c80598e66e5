#pragma once
// The collective watchdog: every collective of a multi-process job has a deadline
// (DPL_COLLECTIVE_TIMEOUT). One thread per process watches the operation the process is in; when
// it has waited past the deadline, the rank asks every other rank where it is (over a duplicate
// of MPI_COMM_WORLD of its own, with non-blocking calls and a bounded wait), reports the
// collective, its sequence number and the ranks that did not arrive, aborts the registered NCCL
// communicators and then the job. See docs/reliability.md.
//
// The hot path is a WatchScope around each call: a few relaxed atomic stores and one clock read,
// no communication. The thread and the exchange live in src/comm/mpi/watchdog.cpp; builds
// without MPI have one process and no watchdog.

#include <chrono>
#include <cstdint>
#include <string>

namespace dpl::comm::detail {

/// Starts the watchdog once per process, on the first call (later calls do nothing). Collective
/// over MPI_COMM_WORLD on the first call (it duplicates MPI_COMM_WORLD), whatever the settings,
/// so that every rank makes the same calls. The thread runs when the job has several ranks and
/// DPL_COLLECTIVE_TIMEOUT is not 0; it is stopped and joined when MPI is finalised. Requires
/// ensure_mpi().
void start_watchdog();

/// The deadline in seconds (DPL_COLLECTIVE_TIMEOUT, read when the watchdog started; 0: none).
int watchdog_timeout();

/// Whether the MPI runtime lets the watchdog's thread communicate (MPI_THREAD_MULTIPLE). Without
/// it an expired rank reports only what it knows itself and ends its own process, which makes
/// mpiexec end the job.
bool watchdog_can_communicate();

/// A copy of `name` that lives as long as the process, for WatchScope (communicator names are
/// few and short).
const char* interned_name(const std::string& name);

/// Marks the calling thread's operation for the watchdog from construction to destruction.
/// `op` and `comm` must outlive the process (string literals, interned_name()). A collective
/// (peer < 0) takes the next sequence number; a point-to-point call (send or recv, peer its other
/// rank) keeps the number of the last collective. Nested scopes (a collective inside another,
/// e.g. create_communicator's) count only the outermost.
class WatchScope {
 public:
  WatchScope(const char* op, const char* comm, int peer = -1) noexcept;
  ~WatchScope();
  WatchScope(const WatchScope&) = delete;
  WatchScope& operator=(const WatchScope&) = delete;

 private:
  bool outermost_ = false;
};

/// What the watchdog knows of the current (or last) operation of this process.
struct WatchedOp {
  const char* op = nullptr;    // "allreduce", ...; null before the first
  const char* comm = nullptr;  // the communicator's name
  int peer = -1;               // the other rank of a send or recv, else -1
  std::uint64_t seq = 0;       // number of collectives entered, the current one included
  std::int64_t start_ns = 0;   // steady_clock time the operation began; 0: not in one now
};

/// This process's current operation (start_ns 0 when it is in none). Safe from any thread.
WatchedOp current_op() noexcept;

/// steady_clock::now() in nanoseconds, the clock of WatchedOp::start_ns.
inline std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Collective work the host has queued but the device may not have finished (NCCL kernels): the
/// host call returned, so the WatchScope has ended, but the ranks may still be waiting for each
/// other on the GPU. Registered objects are polled by the watchdog thread, under its lock, and
/// aborted when any deadline expires.
class DeviceWork {
 public:
  virtual ~DeviceWork() = default;
  /// The oldest queued operation that has not finished on the device, or one with start_ns 0 when
  /// everything has. Called from the watchdog thread.
  virtual WatchedOp unfinished() noexcept = 0;
  /// Aborts the device communicators (ncclCommAbort), so that nothing is left hanging on the
  /// GPU. Called from the watchdog thread just before the job is aborted.
  virtual void abort() noexcept = 0;
};

/// Registers `work` with the watchdog until remove_device_work(work) (call both from the
/// destructor's owner: the watchdog may poll `work` until removal returns).
void add_device_work(DeviceWork* work);
void remove_device_work(DeviceWork* work) noexcept;

}  // namespace dpl::comm::detail
