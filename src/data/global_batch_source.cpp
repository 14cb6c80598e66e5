#include "dpl/data/global_batch_source.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include "dpl/core/error.hpp"
#include "dpl/core/random.hpp"
#include "dpl/data/dataset.hpp"

namespace dpl::data {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::int64_t per_process_batch(std::int64_t global_batch, int world_size, const std::string& who,
                               const std::string& unit) {
  DPL_CHECK(global_batch >= 1, who, ": expected a global batch >= 1, got ", global_batch);
  DPL_CHECK(world_size >= 1, who, ": expected world_size >= 1, got ", world_size);
  if (global_batch % world_size != 0) {
    std::string divisors;
    int listed = 0;
    for (std::int64_t d = 1; d <= global_batch && listed < 16; ++d) {
      if (global_batch % d != 0) continue;
      divisors += (listed++ ? ", " : "") + std::to_string(d);
    }
    DPL_FAIL(who, ": a global batch of ", global_batch, " ", unit, " does not divide among ", world_size,
             " processes (", global_batch, " mod ", world_size, " = ", global_batch % world_size,
             "); expected a process count that divides the global batch (", listed < 16 ? "one of " : "e.g. ",
             divisors, ")");
  }
  return global_batch / world_size;
}

void advance_global_position(std::int64_t n, std::int64_t global_batch, std::int64_t& epoch, std::int64_t& position,
                             bool& is_new_epoch, std::int64_t& iteration) {
  position += global_batch;
  is_new_epoch = position >= n;
  epoch += position / n;
  position %= n;
  ++iteration;
}

void check_global_position(std::int64_t n, std::int64_t global_batch, std::int64_t epoch, std::int64_t position,
                           std::int64_t iteration, const std::string& who, const std::string& unit,
                           const std::string& writer) {
  DPL_CHECK(epoch >= 0 && iteration >= 0, who, ": expected epoch and iteration >= 0, got ", epoch, " and ",
            iteration);
  DPL_CHECK(position >= 0 && position < n, who, ": expected a position in [0, ", n, "), got ", position);
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const bool fits = iteration <= kMax / global_batch && epoch <= (kMax - position) / n;
  DPL_CHECK(fits && epoch * n + position == iteration * global_batch, who, ": the counters disagree: epoch ", epoch,
            " x ", n, " ", unit, " + position ", position, " should equal iteration ", iteration, " x global batch ",
            global_batch, "; expected a state written by ", writer);
}

std::vector<std::int64_t> global_epoch_order(std::int64_t n, bool shuffle, std::uint64_t seed, std::int64_t e) {
  DPL_CHECK(n >= 1 && e >= 0, "global_epoch_order: expected n >= 1 and an epoch >= 0, got ", n, " and ", e);
  if (!shuffle) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), std::int64_t{0});
    return order;
  }
  // A function of (seed, e) only, so an epoch's order does not depend on how the run got there.
  Generator gen(splitmix64(splitmix64(seed) + static_cast<std::uint64_t>(e)));
  return permutation(n, gen);
}

void check_same_data_order(const GlobalDataState& saved, const GlobalDataState& now, const std::string& who) {
  std::string differences;
  const auto differ = [&differences](const std::string& name, const std::string& was, const std::string& is,
                                     const std::string& hint) {
    if (was == is) return;
    differences += ::dpl::detail::concat(differences.empty() ? "" : "; ", name, " was ", was, " when saved, is ", is,
                                         " now", hint);
  };
  differ("the number of samples", std::to_string(saved.samples), std::to_string(now.samples), "");
  const std::string hint =
      " (the per-process batch times the number of processes; a state loads on any process count that divides the "
      "saved global batch, each process taking its share)";
  differ("the global batch", std::to_string(saved.global_batch), std::to_string(now.global_batch), hint);
  std::vector<std::string> names;
  for (const auto* list : {&saved.settings, &now.settings})
    for (const auto& kv : *list)
      if (std::find(names.begin(), names.end(), kv.first) == names.end()) names.push_back(kv.first);
  const auto find = [](const std::vector<std::pair<std::string, std::string>>& list, const std::string& name) {
    const auto it = std::find_if(list.begin(), list.end(), [&](const auto& kv) { return kv.first == name; });
    return it == list.end() ? std::string("(not recorded)") : it->second;
  };
  for (const std::string& name : names)
    differ("setting '" + name + "'", find(saved.settings, name), find(now.settings, name), "");
  DPL_CHECK(differences.empty(), who, ": the state is of another data order: ", differences,
            "; resume with the data and settings the state was saved with");
}

}  // namespace dpl::data
