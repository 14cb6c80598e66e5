#include "dpl/comm/communicator.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

#include "comm/checks.hpp"
#include "dpl/comm/agreement.hpp"
#include "comm/environment.hpp"
#include "comm/factories.hpp"
#include "dpl/config.hpp"
#include "dpl/core/settings.hpp"
#if DPL_WITH_MPI
#include "comm/mpi/mpi_runtime.hpp"
#include "comm/watchdog.hpp"
#endif

namespace dpl::comm {

namespace {

struct Entry {
  const char* name;
  detail::HostMaker make_host;  // host buffers: the MPI algorithm (or the one-process stand-in)
  bool reduces_16bit = false;   // whether allreduce takes a 16-bit wire dtype (CommOptions::allreduce_dtype)
#if DPL_WITH_NCCL
  detail::DeviceMaker make_device = nullptr;  // GPU buffers; null: staged through pinned host memory
#endif
};

// The one table of names: per name, the host algorithm and, in NCCL builds, the device one. The
// order is the order communicator_names() reports.
const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
#if DPL_WITH_NCCL
      // naive keeps the plain host staging: the baseline the others are measured against.
      {"naive", &detail::make_naive},
      {"hierarchical", &detail::make_hierarchical, true, &detail::make_nccl_hierarchical},
      {"two_dimensional", &detail::make_two_dimensional, true, &detail::make_nccl_two_dimensional},
      {"flat", &detail::make_naive, false, &detail::make_nccl_flat},
      // On host buffers these two run the naive MPI algorithm; their point is device memory.
      {"pure_nccl", &detail::make_naive, true, &detail::make_pure_nccl},
      {"single_node", &detail::make_naive, true, &detail::make_single_node},
#elif DPL_WITH_MPI
      {"naive", &detail::make_naive},
      {"hierarchical", &detail::make_hierarchical},
      {"two_dimensional", &detail::make_two_dimensional},
      {"flat", &detail::make_naive},
#else
      {"naive", &detail::make_single},
      {"hierarchical", &detail::make_single},
      {"two_dimensional", &detail::make_single},
      {"flat", &detail::make_single},
#endif
  };
  return entries;
}

// The algorithm of one table entry. Collective.
std::unique_ptr<Communicator> build_algorithm(const Entry& e) {
  std::unique_ptr<detail::HostCommunicator> host = e.make_host(e.name);
#if DPL_WITH_NCCL
  if (e.make_device) {
    const detail::MpiGroups groups = host->groups();
    return e.make_device(std::move(host), groups);
  }
#endif
#if DPL_WITH_CUDA
  // CUDA builds accept device buffers by staging them through pinned host memory.
  return detail::make_staging(std::move(host));
#else
  return host;
#endif
}

// The communicator of one table entry, as create_communicator hands it out. Collective.
std::unique_ptr<Communicator> build(const Entry& e) {
#if DPL_WITH_MPI
  return detail::make_watched(build_algorithm(e));
#else
  return build_algorithm(e);
#endif
}

// The names whose allreduce takes a 16-bit wire dtype, for messages.
std::string names_reducing_16bit() {
  std::string out;
  for (const auto& e : registry())
    if (e.reduces_16bit) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out.empty() ? "none in this build" : out;
}

}  // namespace

void Communicator::allreduce(Tensor& buf, ReduceOp op, DType wire_dtype) {
  if (!buf.defined() || wire_dtype == buf.dtype()) return allreduce(buf, op);
  const std::string what = detail::what_call("allreduce", name());
  DPL_CHECK(wire_dtype == kBFloat16 || wire_dtype == kFloat16, what, ": expected the wire dtype ", buf.dtype(),
            " (the buffer's), or bfloat16 or float16 for a float32 buffer on a GPU, got ", wire_dtype);
  DPL_CHECK(buf.dtype() == kFloat32 && buf.device().is_cuda(), what, ": a ", wire_dtype,
            " wire needs a float32 buffer on a GPU, got a ", buf.dtype(), " buffer on ", buf.device());
  allreduce_narrowed(buf, op, wire_dtype);
}

void Communicator::allreduce_narrowed(Tensor&, ReduceOp, DType wire_dtype) {
  DPL_FAIL(detail::what_call("allreduce", name()), ": a ", wire_dtype,
           " wire needs a communicator that reduces 16-bit types on the GPU with NCCL (", names_reducing_16bit(),
           "); '", name(), "' reduces in float32 only");
}

bool calls_from_other_threads_allowed() {
#if DPL_WITH_MPI
  return detail::serialized_threads();
#else
  return true;
#endif
}

std::vector<std::string> communicator_names() {
  std::vector<std::string> names;
  for (const auto& e : registry()) names.emplace_back(e.name);
  return names;
}

std::shared_ptr<Communicator> create_communicator(const std::string& name) {
  return create_communicator(name, CommOptions{});
}

std::shared_ptr<Communicator> create_communicator(const std::string& name, const CommOptions& options) {
  const DType dt = options.allreduce_dtype;
#if DPL_WITH_MPI
  // Before any check that could fail on some ranks only, and before the algorithm's own
  // collectives: ranks that asked for different things would otherwise hang in them.
  detail::ensure_mpi();
  detail::start_watchdog();
  // Creating a communicator is collective too: a rank that never comes is reported like any other.
  detail::WatchScope scope("create_communicator", detail::interned_name(name));
  const auto rpn = settings().ranks_per_node;
  detail::check_same_request({{"communicator", name},
                              {"allreduce_dtype", dtype_name(dt)},
                              {"DPL_RANKS_PER_NODE", rpn.empty() ? std::string("unset") : detail::node_sizes_text(rpn)}});
#endif
  DPL_CHECK(dt == kFloat32 || dt == kBFloat16 || dt == kFloat16, "create_communicator('", name,
            "'): expected CommOptions::allreduce_dtype float32, bfloat16 or float16, got ", dt);
  for (const auto& e : registry()) {
    if (name != e.name) continue;
    // Checked before e.make, which is collective: every rank fails here alike.
    DPL_CHECK(dt == kFloat32 || e.reduces_16bit, "create_communicator('", name, "'): allreduce_dtype ", dt,
              " needs a communicator that reduces on the GPU with NCCL (", names_reducing_16bit(), "); '", name,
              "' reduces in float32 only");
    std::unique_ptr<Communicator> c = build(e);
    c->options_ = options;
    return c;
  }
  std::ostringstream valid;
  const auto names = communicator_names();
  for (std::size_t i = 0; i < names.size(); ++i) valid << (i ? ", " : "") << "'" << names[i] << "'";
  DPL_FAIL("create_communicator: unknown communicator '", name, "'; valid names in this build: ", valid.str());
}

bool even_nodes(const Topology& t) {
  return std::all_of(t.node_sizes.begin(), t.node_sizes.end(), [&](int n) { return n == t.node_sizes.front(); });
}

void abort_all(const std::string& message, int exit_code) {
  detail::report_error(detail::job_rank(), message);
  detail::abort_job(exit_code);
}

std::vector<double> allgather_doubles(Communicator& comm, const std::vector<double>& mine) {
  const auto n = static_cast<std::int64_t>(mine.size());
  check_settings_agree(comm, {{"number of values gathered", std::to_string(n)}}, "allgather_doubles");
  Tensor send = Tensor::empty({n}, kInt64);
  std::memcpy(send.raw_data(), mine.data(), mine.size() * sizeof(double));
  Tensor all = Tensor::empty({n * comm.size()}, kInt64);
  if (n > 0) comm.allgather(send, all);
  std::vector<double> out(static_cast<std::size_t>(n * comm.size()));
  std::memcpy(out.data(), all.raw_data(), out.size() * sizeof(double));
  return out;
}

}  // namespace dpl::comm
