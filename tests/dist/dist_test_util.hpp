#pragma once
// Helpers shared by the distributed tests (tests/dist/*_test.cpp).
//
// Rules for writing a distributed test, so that a failure never turns into a hang:
//  - every rank runs the same tests in the same order and makes the same collective calls;
//  - do the communication first, then check with EXPECT_* (an ASSERT_* that returns early on one
//    rank leaves the others waiting in the next collective);
//  - an unexpected exception aborts every rank with its message (see dist_main.cpp).

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpl/comm.hpp"
#include "dpl/config.hpp"
#include "dpl/core/random.hpp"
#include "dpl/core/settings.hpp"
#include "dpl/tensor/tensor.hpp"

namespace dpl::test {

/// The communicator named `name`, created on the first call in this process and shared by later
/// tests (creating one is collective, so every rank must ask for the same names in the same order,
/// which running the same tests guarantees). The owner to hand to a GradientReducer, a
/// MultiNodeOptimizer or a Trainer, which share it.
inline const std::shared_ptr<comm::Communicator>& shared_communicator(const std::string& name) {
  static std::map<std::string, std::shared_ptr<comm::Communicator>> cache;
  auto& slot = cache[name];
  if (!slot) slot = comm::create_communicator(name);
  return slot;
}

/// shared_communicator(name), for code that only borrows it.
inline comm::Communicator& communicator(const std::string& name) { return *shared_communicator(name); }

/// The communicator `name` with gradients carried in `wire` (CommOptions::allreduce_dtype), cached
/// as communicator() caches (same rules: every rank asks for the same ones in the same order).
inline const std::shared_ptr<comm::Communicator>& shared_communicator_with(const std::string& name, DType wire) {
  static std::map<std::pair<std::string, int>, std::shared_ptr<comm::Communicator>> cache;
  auto& slot = cache[{name, static_cast<int>(wire)}];
  if (!slot) slot = comm::create_communicator(name, comm::CommOptions{wire});
  return slot;
}

/// The communicator of shared_communicator_with(name, wire).
inline comm::Communicator& communicator_with(const std::string& name, DType wire) {
  return *shared_communicator_with(name, wire);
}

/// Whether communicator `name` carries GPU gradients in a 16-bit wire dtype (through NCCL).
inline bool reduces_16bit(const std::string& name) {
  return DPL_WITH_NCCL && (name == "pure_nccl" || name == "single_node" || name == "hierarchical" ||
                           name == "two_dimensional");
}

/// This rank's place among the ranks of its machine (the hardware's, whatever the virtual node
/// layout): how many share it, and which of them this one is. Collective over MPI_COMM_WORLD.
struct HostPlace {
  int local_rank = 0;
  int local_size = 1;
};
inline HostPlace host_place() {
  MPI_Comm shared;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
  HostPlace p;
  MPI_Comm_rank(shared, &p.local_rank);
  MPI_Comm_size(shared, &p.local_size);
  MPI_Comm_free(&shared);
  return p;
}

/// Whether this run's DPL_RANKS_PER_NODE lists nodes of unequal sizes ("2,1"). Read from the
/// environment, not from a communicator, so that it can decide test lists at static
/// initialisation, before MPI runs. (The tests run on one machine, whose hardware node is even.)
inline bool uneven_nodes() {
  const std::vector<int> sizes = settings().ranks_per_node;
  for (const int n : sizes)
    if (n != sizes.front()) return true;
  return false;
}

/// Whether the communicator `name` works on this run's layout: two_dimensional refuses uneven
/// nodes (topology_test.cpp checks the refusal).
inline bool works_on_this_layout(const std::string& name) { return name != "two_dimensional" || !uneven_nodes(); }

/// Every communicator name that works on host buffers in this layout (single_node refuses a job
/// over several nodes; device_communicators_test.cpp covers it).
inline std::vector<std::string> host_communicator_names() {
  std::vector<std::string> names;
  for (const char* name : {"naive", "hierarchical", "two_dimensional", "flat"})
    if (works_on_this_layout(name)) names.emplace_back(name);
  if (DPL_WITH_NCCL) names.emplace_back("pure_nccl");
  return names;
}

/// One rank's rows of a batch that every rank generates alike.
struct Shard {
  Tensor x, y;
};

/// The batch of `batch` rows (x normal (batch, features), y int32 labels below `classes`) drawn
/// from `seed`, and this rank's contiguous share of it. Requires batch divisible by comm.size().
inline Shard batch_shard(const comm::Communicator& comm, std::uint64_t seed, std::int64_t batch,
                         std::int64_t features, std::int64_t classes) {
  Generator gen(seed);
  const Tensor x = Tensor::normal({batch, features}, 0.f, 1.f, gen);
  Tensor y = Tensor::empty({batch}, kInt32);
  for (std::int64_t i = 0; i < batch; ++i)
    y.set<std::int32_t>({i}, static_cast<std::int32_t>(gen.below(static_cast<std::uint64_t>(classes))));
  const std::int64_t local = batch / comm.size();
  return {x.narrow(0, comm.rank() * local, local).contiguous(), y.narrow(0, comm.rank() * local, local).contiguous()};
}

/// The largest |a - b| / (1 + |b|) over two float32 tensors' elements (host values): relative for
/// large values, absolute near zero. Sizes that differ count as infinitely far apart.
inline double worst_relative_difference(const Tensor& a, const Tensor& b) {
  const auto x = a.to(Device::cpu()).to_vector<float>(), y = b.to(Device::cpu()).to_vector<float>();
  if (x.size() != y.size()) return std::numeric_limits<double>::infinity();
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::abs(double(x[i]) - y[i]) / (1.0 + std::abs(double(y[i]))));
  return worst;
}

/// Whether every rank holds exactly this rank's values of t (collective: one allgather of t as
/// float32 host values).
inline bool same_on_every_rank(comm::Communicator& comm, const Tensor& t) {
  const Tensor mine = t.to(Device::cpu()).to(kFloat32).contiguous();
  Tensor all = Tensor::empty({comm.size() * mine.numel()}, kFloat32);
  comm.allgather(mine, all);
  const auto want = mine.to_vector<float>();
  const auto got = all.to_vector<float>();
  for (int r = 0; r < comm.size(); ++r)
    for (std::size_t i = 0; i < want.size(); ++i) {
      const float v = got[static_cast<std::size_t>(r) * want.size() + i];
      // Bitwise, with NaN equal to NaN: the ranks must have done the very same arithmetic.
      if (!(v == want[i] || (v != v && want[i] != want[i]))) return false;
    }
  return true;
}

/// Sets (or with nullopt, unsets) an environment variable for the lifetime of this object, then
/// restores the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace dpl::test
