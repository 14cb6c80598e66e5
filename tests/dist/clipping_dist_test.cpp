// Gradient hooks and clipping inside MultiNodeOptimizer under mpiexec: they see the averaged
// gradients (so a clipping norm agrees on every rank), run once per update, and the phase timers
// still record every phase.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"

namespace {
using namespace dpl;

TEST(ClippingDist, HookSeesTheAveragedGradientsOncePerUpdateAndTimersRecord) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("naive");
  const int rank = comm->rank(), size = comm->size();
  Generator gen(3);
  nn::MLP model(4, 3, 2, gen);
  auto opt = parallel::create_multi_node_optimizer(std::make_unique<optim::SGD>(0.0f), comm);
  opt->setup(model);

  std::vector<float> seen_first;  // the first gradient element each time the hook ran
  std::vector<std::size_t> allreduces_at_hook;  // allreduce samples recorded when it ran
  opt->add_gradient_hook([&](nn::ParameterArena& arena) {
    seen_first.push_back(arena.grads().to_vector<float>()[0]);
    const profile::PhaseSeries* allreduce = opt->timer().find("allreduce");
    allreduces_at_hook.push_back(allreduce ? allreduce->samples.size() : 0);
  });
  const auto clipping = optim::clip_gradients(*opt, 0.5);

  const std::int64_t n = model.num_parameters();
  for (int step = 0; step < 3; ++step) {
    // Every parameter's gradient is rank + 1 here, so their mean is (size + 1) / 2.
    for (const auto& [name, p] : model.named_parameters()) {
      Tensor g = p.grad();
      g.fill_(rank + 1);
    }
    opt->update();
  }
  const double mean = (size + 1) / 2.0;
  const profile::Summary s = opt->summary(0);

  ASSERT_EQ(seen_first.size(), 3u);
  for (float v : seen_first) EXPECT_FLOAT_EQ(v, static_cast<float>(mean)) << "rank " << rank;
  EXPECT_EQ(allreduces_at_hook, (std::vector<std::size_t>{1, 2, 3}));
  EXPECT_NEAR(clipping->last_norm(), mean * std::sqrt(static_cast<double>(n)), 1e-3 * mean * std::sqrt(static_cast<double>(n)));
  // The clipped gradients have the threshold's norm, on every rank alike.
  EXPECT_NEAR(optim::gradient_norm(model.arena()), 0.5, 1e-5);
  std::vector<std::string> names;
  for (const auto& p : s.phases) names.push_back(p.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "optimize"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "allreduce"), names.end());
}

}  // namespace
