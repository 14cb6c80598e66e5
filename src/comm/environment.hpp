#pragma once
// Process-level policy shared by every communicator: environment variables, the host-thread
// rule, error reporting. Pure functions where possible so the rules can be tested on their own.

#include <optional>
#include <string>
#include <vector>

namespace dpl::comm::detail {

/// The virtual nodes DPL_RANKS_PER_NODE asks for: the number of ranks of each node, in rank order,
/// summing to world_size; empty when the variable is unset (topology then comes from the
/// hardware). A single k gives world_size / k nodes of k. Throws dpl::Error naming the variable,
/// its value and the job size when k does not divide world_size or a list does not add up to it.
std::vector<int> virtual_node_sizes(int world_size);
/// The index of the node that holds `rank`, for node sizes in rank order (as above).
int node_of(int rank, const std::vector<int>& node_sizes);
/// Node sizes as text for messages and request checks: "2,1" (the form DPL_RANKS_PER_NODE takes).
std::string node_sizes_text(const std::vector<int>& node_sizes);

/// The host-thread rule. Returns the thread count to set, or nullopt to leave the OpenMP runtime
/// as it is (OMP_NUM_THREADS set and DPL_NUM_THREADS not). dpl_num_threads wins over everything;
/// otherwise max(1, cores / processes_on_host).
std::optional<int> choose_num_threads(std::optional<int> dpl_num_threads, bool omp_num_threads_set, int cores,
                                      int processes_on_host);

/// Logical CPUs of the machine (at least 1).
int hardware_cpus();
/// CPUs this process may run on (its affinity mask); hardware_cpus() where that is unknown.
int affinity_cpus();

/// What configure_threads_once did.
struct ThreadSetup {
  bool first = false;           // this call applied the rule (the first in the process)
  bool oversubscribed = false;  // the process runs more threads than its affinity mask has CPUs
};
/// Applies the host-thread rule once per process (later calls change nothing): sets
/// dpl::set_num_threads unless the rule says to leave the OpenMP runtime alone.
ThreadSetup configure_threads_once(int processes_on_host);
/// The warning rank 0 prints when `oversubscribed_ranks` of `size` ranks run more threads than
/// they have CPUs.
std::string binding_warning(int oversubscribed_ranks, int size, int cpus, int threads);

/// Installs, once, a terminate handler that reports the pending exception as
/// "rank R: what()" and aborts the job through abort_job().
void install_terminate_handler();
/// Writes "rank R: message" (one line per message line, so interleaved ranks stay readable) to
/// stderr in one write.
void report_error(int rank, const std::string& message);

// --- provided by the MPI layer (src/comm/mpi) or the one-process layer (src/comm/single_communicator.cpp) ---------
/// This process's rank in the job, as far as it can be known now (0 when it cannot).
int job_rank() noexcept;
/// Ends every process of the job with exit_code (MPI_Abort where MPI runs); never returns.
[[noreturn]] void abort_job(int exit_code) noexcept;

}  // namespace dpl::comm::detail
