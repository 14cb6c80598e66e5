#include "comm/environment.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <sstream>

#include "dpl/core/error.hpp"
#include "dpl/core/settings.hpp"
#include "dpl/core/threads.hpp"

namespace dpl::comm::detail {

std::vector<int> virtual_node_sizes(int world_size) {
  const std::vector<int> asked = settings().ranks_per_node;
  if (asked.empty()) return {};
  if (asked.size() == 1) {
    const int k = asked[0];
    if (world_size % k != 0) {
      // The uneven layout closest to what was asked: whole nodes of k, the rest on a last node.
      std::vector<int> nearest(static_cast<std::size_t>(world_size / k), k);
      nearest.push_back(world_size % k);
      DPL_FAIL("DPL_RANKS_PER_NODE=", k, " does not divide the job's ", world_size,
               " ranks into whole nodes; choose a divisor of ", world_size,
               ", or list the node sizes in rank order for uneven nodes (e.g. DPL_RANKS_PER_NODE=",
               node_sizes_text(nearest), ")");
    }
    return std::vector<int>(static_cast<std::size_t>(world_size / k), k);
  }
  long long total = 0;
  for (const int n : asked) total += n;
  DPL_CHECK(total == world_size, "DPL_RANKS_PER_NODE=", node_sizes_text(asked), " lists nodes of ", total,
            " ranks in all, but the job has ", world_size, " ranks; the node sizes must add up to the number of ranks");
  return asked;
}

int node_of(int rank, const std::vector<int>& node_sizes) {
  int first = 0;
  for (std::size_t node = 0; node < node_sizes.size(); ++node) {
    first += node_sizes[node];
    if (rank < first) return static_cast<int>(node);
  }
  DPL_FAIL("node_of: rank ", rank, " lies beyond the ", first, " ranks of nodes ", node_sizes_text(node_sizes));
}

std::string node_sizes_text(const std::vector<int>& node_sizes) {
  std::string out;
  for (const int n : node_sizes) out += (out.empty() ? "" : ",") + std::to_string(n);
  return out;
}

std::optional<int> choose_num_threads(std::optional<int> dpl_num_threads, bool omp_num_threads_set, int cores,
                                      int processes_on_host) {
  if (dpl_num_threads) return dpl_num_threads;
  if (omp_num_threads_set) return std::nullopt;
  return std::max(1, cores / std::max(1, processes_on_host));
}

int hardware_cpus() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return hardware_cpus();
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : hardware_cpus();
}

ThreadSetup configure_threads_once(int processes_on_host) {
  static bool done = false;
  ThreadSetup setup;
  if (done) return setup;
  const Settings env = settings();
  const auto n = choose_num_threads(env.num_threads, env.omp_num_threads_set, hardware_cpus(), processes_on_host);
  if (n) set_num_threads(*n);
  done = true;
  setup.first = true;
  setup.oversubscribed = affinity_cpus() < num_threads();
  return setup;
}

std::string binding_warning(int oversubscribed_ranks, int size, int cpus, int threads) {
  std::ostringstream os;
  os << "dpl: warning: " << oversubscribed_ranks << " of " << size
     << " ranks run more host threads than their CPU affinity allows (rank 0: " << threads << " threads, " << cpus
     << (cpus == 1 ? " CPU" : " CPUs") << "); launch with `mpiexec --bind-to none` (Open MPI binds each rank to one core when -n <= 2)"
     << " or set DPL_NUM_THREADS";
  return os.str();
}

void report_error(int rank, const std::string& message) {
  std::string text;
  std::istringstream lines(message.empty() ? std::string("(no message)") : message);
  for (std::string line; std::getline(lines, line);) text += "rank " + std::to_string(rank) + ": " + line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

namespace {

[[noreturn]] void terminate_handler() noexcept {
  // A second exception while reporting the first must not recurse into this handler.
  static std::atomic<bool> entered{false};
  if (entered.exchange(true)) std::_Exit(1);
  std::string message = "terminate called without an active exception";
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      message = ex.what();
    } catch (...) {
      message = "uncaught exception of a type not derived from std::exception";
    }
  }
  report_error(job_rank(), message);
  abort_job(1);
}

}  // namespace

void install_terminate_handler() {
  static std::once_flag once;
  std::call_once(once, [] { std::set_terminate(terminate_handler); });
}

}  // namespace dpl::comm::detail
