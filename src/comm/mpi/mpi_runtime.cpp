#include "comm/mpi/mpi_runtime.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/environment.hpp"
#include "comm/mpi/test_hooks.hpp"
#include "comm/setting_differences.hpp"
#include "core/stable_hash.hpp"
#include "dpl/core/settings.hpp"

namespace dpl::comm::detail {

void mpi_check(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  DPL_FAIL(what, " failed: ", (len > 0 ? std::string(text, static_cast<std::size_t>(len)) : "MPI error " + std::to_string(code)));
}

namespace {

bool mpi_running() noexcept {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// Runs at exit of a process whose MPI we initialised. A clean exit finalises. A non-zero exit
// status means this rank is leaving early (a caught error, an explicit exit(1)); finalising would
// wait in MPI_Finalize for ranks that may be waiting for us in a collective, so the job is
// aborted instead.
void leave_mpi(int status) {
  if (!mpi_running()) return;
  if (status != 0) {
    report_error(job_rank(), "exiting with status " + std::to_string(status) + "; aborting every rank");
    abort_job(status);
  }
  MPI_Finalize();
}

#ifdef __GLIBC__
void leave_mpi_on_exit(int status, void*) { leave_mpi(status); }
#else
void leave_mpi_at_exit() { leave_mpi(0); }
#endif

}  // namespace

void ensure_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  DPL_CHECK(!finalized, "create_communicator: MPI has already been finalised; create communicators before "
                        "MPI_Finalize");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // The collective watchdog's thread talks to the other ranks while this one may be blocked in a
    // collective, which needs MPI_THREAD_MULTIPLE. Without a watchdog, SERIALIZED (calls from any
    // thread, one at a time) is enough: the overlapped gradient allreduce runs the buckets'
    // collectives on a worker thread while the main thread runs backward
    // (src/parallel/bucket_worker.cpp).
    const int level = settings().collective_timeout > 0 ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
    const int rc = MPI_Init_thread(nullptr, nullptr, level, &provided);
    DPL_CHECK(rc == MPI_SUCCESS, "create_communicator: MPI_Init_thread failed with code ", rc);
#ifdef __GLIBC__
    on_exit(&leave_mpi_on_exit, nullptr);  // unlike atexit, tells us the exit status
#else
    std::atexit(&leave_mpi_at_exit);
#endif
  }
  install_terminate_handler();
}

bool serialized_threads() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return false;
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level >= MPI_THREAD_SERIALIZED;
}

void check_same_request(const std::vector<NamedValue>& named) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) return;
  const std::string request = encode_settings(named);
  const std::uint64_t mine = dpl::detail::stable_hash(request);
  std::vector<std::uint64_t> hashes(static_cast<std::size_t>(size));
  mpi_check(MPI_Allgather(&mine, 1, MPI_UINT64_T, hashes.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD),
            "create_communicator: MPI_Allgather");
  if (std::all_of(hashes.begin(), hashes.end(), [&](std::uint64_t h) { return h == hashes[0]; })) return;
  // They differ: gather every rank's request so that every rank can say who asked for what.
  const int length = static_cast<int>(request.size());
  std::vector<int> lengths(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  mpi_check(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD),
            "create_communicator: MPI_Allgather");
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += lengths[static_cast<std::size_t>(r)];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  mpi_check(MPI_Allgatherv(request.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                           MPI_COMM_WORLD),
            "create_communicator: MPI_Allgatherv");
  std::vector<std::string> by_rank;
  for (int r = 0; r < size; ++r) {
    by_rank.push_back(all.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]),
                                 static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)])));
  }
  DPL_FAIL("create_communicator: the ranks asked for different communicators: ", setting_differences(by_rank),
           "; every rank must create the same communicator with the same options and environment");
}

int job_rank() noexcept {
  if (mpi_running()) {
    int rank = 0;
    if (MPI_Comm_rank(MPI_COMM_WORLD, &rank) == MPI_SUCCESS) return rank;
  }
  // Before MPI_Init (or after MPI_Finalize) the launcher's environment still knows.
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

void abort_job(int exit_code) noexcept {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  // Without MPI the launcher notices this process's non-zero exit and ends the job.
  std::_Exit(exit_code);
}

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return MPI_FLOAT;
    case DType::kInt32: return MPI_INT32_T;
    case DType::kInt64: return MPI_INT64_T;
    case DType::kUInt8: return MPI_UINT8_T;
    case DType::kBFloat16:
    case DType::kFloat16: return MPI_UINT16_T;
  }
  DPL_FAIL("mpi_datatype: no MPI datatype for dtype ", dtype);
}

std::int64_t max_count() {
  const std::int64_t n = test_hooks::mpi_overrides().max_count;
  return (n <= 0 || n > INT_MAX) ? INT_MAX : n;
}

int tag_upper_bound() {
  void* value = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found);
  return found && value ? *static_cast<int*>(value) : 32767;  // 32767: the least MPI guarantees
}

CommHandle& CommHandle::operator=(CommHandle&& o) noexcept {
  if (this != &o) {
    reset();
    comm_ = o.comm_;
    o.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

void CommHandle::reset() noexcept {
  if (comm_ != MPI_COMM_NULL && mpi_running()) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

}  // namespace dpl::comm::detail
