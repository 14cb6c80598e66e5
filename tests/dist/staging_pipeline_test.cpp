// The schedule of the pipelined staging (comm/staging_pipeline.hpp) with host copies standing in
// for the device copies: copies are only queued by start_in/start_out and carried out when
// waited for (or at the end), as an asynchronous copy engine could. The collective is a real
// allreduce of each staged chunk, so the result must equal one allreduce of the whole buffer.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "comm/staging_pipeline.hpp"
#include "dist_test_util.hpp"
#include "dpl/comm.hpp"

namespace dpl::test {
namespace {

struct Copy {
  std::int64_t chunk;
  bool out;
};

TEST(StagingPipeline, ChunkedStagedAllreduceEqualsOneAllreduce) {
  auto& comm = communicator("naive");
  for (int slots : {2, 3, 4}) {
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{17}, std::int64_t{1000}, std::int64_t{100003}}) {
      const std::int64_t per_chunk = 1000;
      const std::int64_t chunks = (n + per_chunk - 1) / per_chunk;
      std::vector<std::int32_t> data(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) data[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i * 3 + comm.rank());
      std::vector<std::int32_t> want = data;
      Tensor whole = Tensor::from_vector<std::int32_t>(want, {n});
      comm.allreduce(whole);

      std::vector<std::vector<std::int32_t>> slot(static_cast<std::size_t>(slots), std::vector<std::int32_t>(per_chunk));
      std::vector<std::optional<Copy>> pending(static_cast<std::size_t>(slots));
      std::vector<std::int64_t> reduced;
      std::int64_t started_in = 0, violations = 0, lookahead_misses = 0;
      auto count_of = [&](std::int64_t c) { return std::min(per_chunk, n - c * per_chunk); };
      auto carry_out = [&](int s) {
        auto& p = pending[static_cast<std::size_t>(s)];
        if (!p) return;
        const std::int64_t c = p->chunk;
        auto* dev = data.data() + c * per_chunk;
        auto* host = slot[static_cast<std::size_t>(s)].data();
        if (p->out) {
          std::memcpy(dev, host, static_cast<std::size_t>(count_of(c)) * 4);
        } else {
          std::memcpy(host, dev, static_cast<std::size_t>(count_of(c)) * 4);
        }
        p.reset();
      };

      comm::detail::StagingSteps steps;
      steps.start_in = [&](std::int64_t c, int s) {
        // A slot still owed a copy out would be overwritten by an asynchronous copy in.
        violations += pending[static_cast<std::size_t>(s)].has_value();
        carry_out(s);
        pending[static_cast<std::size_t>(s)] = Copy{c, false};
        started_in = std::max(started_in, c + 1);
      };
      steps.wait_in = [&](std::int64_t c, int s) {
        violations += !(pending[static_cast<std::size_t>(s)] && pending[static_cast<std::size_t>(s)]->chunk == c);
        carry_out(s);
      };
      steps.reduce = [&](std::int64_t c, int s) {
        if (slots >= 3 && c + 1 < chunks && started_in < c + 2) ++lookahead_misses;
        Tensor view = Tensor::from_vector<std::int32_t>(
            std::vector<std::int32_t>(slot[static_cast<std::size_t>(s)].begin(), slot[static_cast<std::size_t>(s)].begin() + count_of(c)),
            {count_of(c)});
        comm.allreduce(view);
        std::memcpy(slot[static_cast<std::size_t>(s)].data(), view.raw_data(), static_cast<std::size_t>(count_of(c)) * 4);
        reduced.push_back(c);
      };
      steps.start_out = [&](std::int64_t c, int s) { pending[static_cast<std::size_t>(s)] = Copy{c, true}; };
      steps.wait_out = [&](int s) { carry_out(s); };
      comm::detail::run_staging_pipeline(chunks, slots, steps);
      for (int s = 0; s < slots; ++s) carry_out(s);

      std::vector<std::int64_t> order(static_cast<std::size_t>(chunks));
      for (std::int64_t c = 0; c < chunks; ++c) order[static_cast<std::size_t>(c)] = c;
      EXPECT_EQ(reduced, order) << "slots=" << slots << " n=" << n;
      EXPECT_EQ(violations, 0) << "slots=" << slots << " n=" << n;
      EXPECT_EQ(lookahead_misses, 0) << "the copy in of chunk k+1 must be queued before chunk k is reduced";
      EXPECT_EQ(data, whole.to_vector<std::int32_t>()) << "slots=" << slots << " n=" << n;
    }
  }
}

TEST(StagingPipeline, RefusesOneSlot) {
  comm::detail::StagingSteps steps;
  EXPECT_THROW(comm::detail::run_staging_pipeline(3, 1, steps), Error);
}

}  // namespace
}  // namespace dpl::test
