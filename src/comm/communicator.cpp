#include "dpl/comm/communicator.hpp"

#include <cstdint>
#include <sstream>

#include "comm/environment.hpp"
#include "comm/factories.hpp"
#include "dpl/config.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::comm {

namespace {

// What two ranks must agree on before their arenas can be exchanged element by element: the
// element count, the number of parameters, and a hash of every name, shape and offset.
constexpr int kLayoutWords = 3;

std::int64_t layout_hash(const nn::ParameterArena& arena) {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a: stable across processes and platforms
  auto mix = [&h](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  for (const auto& e : arena.entries()) {
    for (unsigned char c : e.name) mix(c);
    mix(e.shape.size());
    for (std::int64_t d : e.shape) mix(static_cast<std::uint64_t>(d));
    mix(static_cast<std::uint64_t>(e.offset));
  }
  return static_cast<std::int64_t>(h);
}

void check_same_layout(Communicator& comm, const nn::ParameterArena& arena) {
  Tensor mine = Tensor::from_vector<std::int64_t>(
      {arena.numel(), static_cast<std::int64_t>(arena.entries().size()), layout_hash(arena)}, {kLayoutWords});
  Tensor all = Tensor::empty({static_cast<std::int64_t>(comm.size()) * kLayoutWords}, kInt64);
  comm.allgather(mine, all);
  const std::int64_t* v = all.data<std::int64_t>();
  for (int r = 1; r < comm.size(); ++r) {
    const std::int64_t* w = v + static_cast<std::int64_t>(r) * kLayoutWords;
    if (w[0] == v[0] && w[1] == v[1] && w[2] == v[2]) continue;
    // Every rank sees the same gathered table, so every rank throws the same error here.
    DPL_FAIL("bcast_data (", comm.name(), "): the models differ between ranks: rank 0 has ", v[1],
             " parameters in ", v[0], " arena elements, rank ", r, " has ", w[1], " parameters in ", w[0],
             " arena elements", (w[0] == v[0] && w[1] == v[1] ? " (same sizes, different names or shapes)" : ""),
             "; every rank must build the same model");
  }
}

}  // namespace

void Communicator::bcast_data(nn::Module& model) {
  nn::ParameterArena& arena = model.arena();
  check_same_layout(*this, arena);
  if (arena.numel() == 0) return;
  Tensor params = arena.params();
  broadcast(params, 0);
}

void Communicator::allreduce_grad(nn::Module& model) {
  nn::ParameterArena& arena = model.arena();
  // The mean over one rank is the gradient itself: no copy, no pass over the arena.
  if (arena.numel() == 0 || size() == 1) {
    last_phases_.clear();
    return;
  }
  Tensor grads = arena.grads();
  allreduce(grads, ReduceOp::kMean);
}

namespace {

struct Entry {
  const char* name;
  std::unique_ptr<Communicator> (*make)(const std::string& name);  // the host (MPI) algorithm
  bool reduces_16bit;  // whether allreduce_grad can reduce in bfloat16/float16 (CommOptions)
};

// The one table of names. New communicators (e.g. the NCCL ones of CUDA builds) add a line here
// under their build condition; the order is the order communicator_names() reports.
const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
#if DPL_WITH_MPI
      {"naive", &detail::make_naive, false},
      {"hierarchical", &detail::make_hierarchical, DPL_WITH_NCCL != 0},
      {"two_dimensional", &detail::make_two_dimensional, DPL_WITH_NCCL != 0},
      {"flat", &detail::make_naive, false},
#if DPL_WITH_NCCL
      // On host buffers these two run the naive MPI algorithm; their point is device memory.
      {"pure_nccl", &detail::make_naive, true},
      {"single_node", &detail::make_naive, true},
#endif
#else
      {"naive", &detail::make_single, false},
      {"hierarchical", &detail::make_single, false},
      {"two_dimensional", &detail::make_single, false},
      {"flat", &detail::make_single, false},
#endif
  };
  return entries;
}

}  // namespace

std::vector<std::string> communicator_names() {
  std::vector<std::string> names;
  for (const auto& e : registry()) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Communicator> create_communicator(const std::string& name) {
  return create_communicator(name, CommOptions{});
}

std::unique_ptr<Communicator> create_communicator(const std::string& name, const CommOptions& options) {
  const DType dt = options.allreduce_dtype;
  DPL_CHECK(dt == kFloat32 || dt == kBFloat16 || dt == kFloat16, "create_communicator('", name,
            "'): expected CommOptions::allreduce_dtype float32, bfloat16 or float16, got ", dt);
  for (const auto& e : registry()) {
    if (name != e.name) continue;
    // Checked before e.make, which is collective: every rank fails here alike.
    DPL_CHECK(dt == kFloat32 || e.reduces_16bit, "create_communicator('", name, "'): allreduce_dtype ", dt,
              " needs a communicator that reduces on the GPU with NCCL (",
              (DPL_WITH_NCCL ? "pure_nccl, single_node, hierarchical, two_dimensional" : "none in this build"),
              "); '", name, "' reduces in float32 only");
    std::unique_ptr<Communicator> c = e.make(name);
#if DPL_WITH_NCCL
    // Device buffers go to NCCL (and pipelined staged MPI); "naive" keeps the plain staging below,
    // the baseline the others are measured against.
    if (name != "naive") return detail::make_device(std::move(c), name, options);
#endif
#if DPL_WITH_CUDA
    // CUDA builds accept device buffers by staging them through pinned host memory.
    c = detail::make_staging(std::move(c));
#endif
    return c;
  }
  std::ostringstream valid;
  const auto names = communicator_names();
  for (std::size_t i = 0; i < names.size(); ++i) valid << (i ? ", " : "") << "'" << names[i] << "'";
  DPL_FAIL("create_communicator: unknown communicator '", name, "'; valid names in this build: ", valid.str());
}

void abort_all(const std::string& message, int exit_code) {
  detail::report_error(detail::job_rank(), message);
  detail::abort_job(exit_code);
}

}  // namespace dpl::comm
