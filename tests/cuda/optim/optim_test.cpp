// CPU-vs-CUDA agreement of the optimizers over several training steps of a small MLP: the
// parameter arena and every state arena must match after each run. Tolerance rtol 1e-4 /
// atol 1e-5: five steps compound the per-step rounding differences of the products. Adam, AdamW
// and RMSprop run with eps 1e-3 rather than 1e-8: they divide by the root of a running mean of g^2,
// so a gradient near zero, which the GPU's and the CPU's sums of products round apart, would still
// take a full-size step of its own sign; the larger eps keeps such steps small and the comparison
// about the kernels. The
// per-tensor kernels of LAMB and LARS are also compared directly, over tensors that span several
// chunks of their table, and the rules run under MixedPrecision for bfloat16 and float16 models.
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/kernels.hpp"

#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

class OptimTest : public CudaTest {
 protected:
  template <typename Opt>
  void check(const std::string& name, float weight_decay, const std::function<std::unique_ptr<Opt>()>& make) {
    const float rtol = 1e-4f;
    SCOPED_TRACE(name + " weight_decay=" + std::to_string(weight_decay));
    Generator g1(seed_), g2(seed_);
    nn::MLP mc(48, 24, 6, g1), mg(48, 24, 6, g2);
    mg.to(gpu());
    auto oc = make(), og = make();
    oc->set_weight_decay(weight_decay);
    og->set_weight_decay(weight_decay);
    oc->setup(mc);
    og->setup(mg);
    for (int step = 0; step < 5; ++step) {
      const Tensor x = rand({20, 24});
      const Tensor y = labels(20, 6);
      const Tensor xg = on_gpu(x), yg = on_gpu(y);
      const Variable lc = oc->update([&] { return softmax_cross_entropy(mc(Variable(x)), y); });
      const Variable lg = og->update([&] { return softmax_cross_entropy(mg(Variable(xg)), yg); });
      expect_close(lg.data(), lc.data(), 1e-4f, 1e-5f, name + " loss at step " + std::to_string(step));
    }
    EXPECT_EQ(og->t(), 5);
    expect_close(mg.arena().params(), mc.arena().params(), rtol, 1e-5f, name + " parameters");
    const auto sc = oc->state(), sg = og->state();
    ASSERT_EQ(sc.size(), sg.size());
    for (std::size_t i = 0; i < sc.size(); ++i) {
      EXPECT_EQ(sg[i].second.device(), gpu());
      expect_close(sg[i].second, sc[i].second, rtol, 1e-5f, name + " state " + sc[i].first);
    }
  }
};

TEST_F(OptimTest, Sgd) {
  for (float wd : {0.f, 1e-2f})
    check<optim::SGD>("SGD", wd, [] { return std::make_unique<optim::SGD>(0.1f); });
}

TEST_F(OptimTest, MomentumSgd) {
  for (float wd : {0.f, 1e-2f})
    check<optim::MomentumSGD>("MomentumSGD", wd, [] { return std::make_unique<optim::MomentumSGD>(0.05f, 0.9f); });
}

TEST_F(OptimTest, Adam) {
  for (float wd : {0.f, 1e-2f})
    check<optim::Adam>("Adam", wd,
                       [] { return std::make_unique<optim::Adam>(optim::AdamOptions(1e-2f).eps(1e-3f)); });
}

TEST_F(OptimTest, AdamW) {
  for (float wd : {0.f, 1e-2f})
    check<optim::AdamW>("AdamW", wd,
                        [] { return std::make_unique<optim::AdamW>(optim::AdamWOptions(1e-2f).eps(1e-3f)); });
}

TEST_F(OptimTest, RMSprop) {
  // eps 1e-3, as AdamW's: see the note at the top. lr 1e-3: RMSprop's first steps are close to
  // lr / sqrt(1 - alpha) = 10 lr per element whatever the gradient's size, and steps of 0.1 (lr
  // 1e-2) move the small MLP's ReLU units across zero within five steps, where the two devices'
  // roundings then choose different units: the comparison would be about the model, not the kernel.
  for (float wd : {0.f, 1e-2f}) {
    check<optim::RMSprop>("RMSprop", wd,
                          [] { return std::make_unique<optim::RMSprop>(optim::RMSpropOptions(1e-3f).eps(1e-3f)); });
    check<optim::RMSprop>("RMSprop centered with momentum", wd, [] {
      return std::make_unique<optim::RMSprop>(
          optim::RMSpropOptions(1e-3f).eps(1e-3f).momentum(0.9f).centered(true));
    });
  }
}

TEST_F(OptimTest, Adagrad) {
  for (float wd : {0.f, 1e-2f})
    check<optim::Adagrad>("Adagrad", wd, [] {
      return std::make_unique<optim::Adagrad>(optim::AdagradOptions(5e-2f).lr_decay(0.1f).initial_accumulator_value(0.1f));
    });
}

TEST_F(OptimTest, LAMB) {
  for (float wd : {0.f, 1e-2f})
    check<optim::LAMB>("LAMB", wd, [] { return std::make_unique<optim::LAMB>(optim::LAMBOptions(1e-2f)); });
}

TEST_F(OptimTest, LARS) {
  for (float wd : {0.f, 1e-2f}) {
    check<optim::LARS>("LARS", wd, [] { return std::make_unique<optim::LARS>(optim::LARSOptions(0.1f).trust_coefficient(0.02f)); });
    check<optim::LARS>("LARS excluding 1-D", wd, [] {
      return std::make_unique<optim::LARS>(optim::LARSOptions(0.1f).trust_coefficient(0.02f).exclude_one_dimensional());
    });
  }
}

// Parameter groups (one launch per group range, the per-tensor rules one table per group): no
// decay and twice the lr for the 1-D parameters, a fifth of the lr for the output layer.
TEST_F(OptimTest, ParameterGroupsMatchCpu) {
  const auto grouped = [](auto rule) {
    rule->add_param_group(optim::ParamGroup::one_dimensional("no decay").weight_decay(0.f).lr(2.f * rule->lr()));
    rule->add_param_group(
        optim::ParamGroup([](const std::string&, const Shape& s) { return s.size() == 2 && s[0] == 6; }, "output")
            .lr(rule->lr() / 5));
    return rule;
  };
  check<optim::Optimizer>("SGD groups", 1e-2f, [&] { return grouped(std::make_unique<optim::SGD>(0.1f)); });
  check<optim::Optimizer>("AdamW groups", 1e-2f, [&] {
    return grouped(std::make_unique<optim::AdamW>(optim::AdamWOptions(1e-2f).eps(1e-3f)));
  });
  check<optim::Optimizer>("RMSprop groups", 1e-2f, [&] {
    return grouped(std::make_unique<optim::RMSprop>(optim::RMSpropOptions(1e-2f).eps(1e-3f).momentum(0.9f)));
  });
  check<optim::Optimizer>("LAMB groups", 1e-2f,
                          [&] { return grouped(std::make_unique<optim::LAMB>(optim::LAMBOptions(1e-2f))); });
  check<optim::Optimizer>("LARS groups", 1e-2f, [&] {
    return grouped(std::make_unique<optim::LARS>(optim::LARSOptions(0.1f).trust_coefficient(0.02f)));
  });
}

// The segment kernels directly: three segments of which the first spans several chunks (and
// ends inside one), the second is excluded; the partial sums, the state and the parameters must
// agree, and a raised skip flag must leave everything unchanged on the GPU as on the CPU.
TEST_F(OptimTest, SegmentKernelsMatchCpu) {
  // Segments start on 16-element boundaries, as an arena's entries do (kernels.hpp).
  const std::int64_t big = 2 * backend::kSegmentChunk + 1008, n = big + 32 + 48;
  // Rows as kernels.hpp describes them: (offset / 16, length, segment, first row, rows, flags).
  std::vector<std::int32_t> rows;
  const auto chunk = [&rows](std::int64_t begin, std::int64_t length, int seg, int first, int count, int flags) {
    rows.insert(rows.end(), {static_cast<std::int32_t>(begin / 16), static_cast<std::int32_t>(length), seg, first, count,
                             flags});
  };
  for (int k = 0; k < 3; ++k)
    chunk(k * backend::kSegmentChunk, k < 2 ? backend::kSegmentChunk : 1008, 0, 0, 3, 0);
  chunk(big, 20, 1, 3, 1, backend::kSegmentExcluded);
  chunk(big + 32, 40, 2, 4, 1, 0);
  const Tensor table = Tensor::from_vector(rows, {5, backend::kSegmentTableColumns});
  const Tensor p0 = rand({n}), g = rand({n}), m0 = rand({n}, -0.1f, 0.1f), v0 = rand({n}, 0.f, 0.1f);
  const Tensor skip_off = Tensor::zeros({1}, kFloat32), skip_on = Tensor::ones({1}, kFloat32);

  for (const bool skip : {false, true}) {
    SCOPED_TRACE(skip ? "skipped" : "taken");
    const Tensor& flag = skip ? skip_on : skip_off;
    const Tensor flag_gpu = on_gpu(flag);
    const backend::UpdateSource src_cpu{nullptr, &flag}, src_gpu{nullptr, &flag_gpu};

    const backend::LambHyper lh{1e-2f, 0.9f, 0.999f, 1e-6f, 1e-2f, 0.271f, 0.00299f};
    Tensor pc = p0.clone(), mc = m0.clone(), vc = v0.clone(), sc = Tensor::zeros({5, 2}, kFloat32);
    Tensor pg = on_gpu(p0), mg = on_gpu(m0), vg = on_gpu(v0), sg = Tensor::zeros({5, 2}, TensorOptions(kFloat32, gpu()));
    const Tensor tg = on_gpu(table), gg = on_gpu(g);
    backend::lamb_moments(pc, g, mc, vc, table, sc, lh, src_cpu);
    backend::lamb_moments(pg, gg, mg, vg, tg, sg, lh, src_gpu);
    backend::lamb_apply(pc, mc, vc, table, sc, lh, src_cpu);
    backend::lamb_apply(pg, mg, vg, tg, sg, lh, src_gpu);
    expect_close(sg, sc, 1e-4f, 1e-6f, "LAMB partial sums");
    expect_close(mg, mc, 1e-6f, 1e-7f, "LAMB m");
    expect_close(vg, vc, 1e-6f, 1e-7f, "LAMB v");
    expect_close(pg, pc, 1e-5f, 1e-6f, "LAMB parameters");
    if (skip) expect_close(pg, on_gpu(p0), 0.f, 0.f, "LAMB parameters after a skipped step");

    const backend::LarsHyper rh{0.1f, 0.9f, 1e-3f, 0.02f};
    Tensor pc2 = p0.clone(), velc = m0.clone(), sc2 = Tensor::zeros({5, 2}, kFloat32);
    Tensor pg2 = on_gpu(p0), velg = on_gpu(m0), sg2 = Tensor::zeros({5, 2}, TensorOptions(kFloat32, gpu()));
    backend::segment_norms(pc2, g, table, sc2);
    backend::segment_norms(pg2, gg, tg, sg2);
    backend::lars_update(pc2, g, velc, table, sc2, rh, src_cpu);
    backend::lars_update(pg2, gg, velg, tg, sg2, rh, src_gpu);
    expect_close(sg2, sc2, 1e-4f, 1e-6f, "LARS partial sums");
    expect_close(velg, velc, 1e-5f, 1e-7f, "LARS velocity");
    expect_close(pg2, pc2, 1e-5f, 1e-6f, "LARS parameters");
  }
}

// The rules under MixedPrecision: 16-bit models, float32 masters that the fused kernels step.
// The masters agree to the rounding of the 16-bit forward and backward (as mixed_precision_test's
// SGD), and the GPU's model equals its rounded masters. The normalised rules move an element by
// about lr whatever its gradient, so a rounding difference in a near-zero gradient can become a
// step of difference: their rates keep three steps inside the tolerance.
TEST_F(OptimTest, RulesUnderMixedPrecisionMatchCpu) {
  using Make = std::function<std::unique_ptr<optim::Optimizer>()>;
  const std::vector<std::pair<std::string, Make>> rules = {
      {"AdamW", [] { return std::make_unique<optim::AdamW>(optim::AdamWOptions(1e-4f)); }},
      {"RMSprop", [] { return std::make_unique<optim::RMSprop>(optim::RMSpropOptions(1e-5f).momentum(0.5f)); }},
      {"Adagrad", [] { return std::make_unique<optim::Adagrad>(optim::AdagradOptions(1e-4f)); }},
      {"LAMB", [] { return std::make_unique<optim::LAMB>(optim::LAMBOptions(1e-2f)); }},
      {"LARS", [] { return std::make_unique<optim::LARS>(optim::LARSOptions(0.1f).trust_coefficient(0.02f)); }},
  };
  // float32 runs without masters: the tests above are its agreement.
  for (DType dt : {kBFloat16, kFloat16}) {
    for (const auto& [name, make] : rules) {
      SCOPED_TRACE(name + " " + dtype_name(dt));
      Generator g1(seed_), g2(seed_);
      nn::MLP mc(32, 16, 4, g1), mg(32, 16, 4, g2);
      mg.to(gpu());
      auto oc = optim::mixed_precision(make(), dt, {256.0, 2.0, 0.5, 2});
      auto og = optim::mixed_precision(make(), dt, {256.0, 2.0, 0.5, 2});
      oc->setup(mc);
      og->setup(mg);
      for (int step = 0; step < 3; ++step) {
        const Tensor x = rand({20, 16}).to(dt), y = labels(20, 4);
        oc->update([&] { return softmax_cross_entropy(mc(Variable(x)), y); });
        og->update([&] { return softmax_cross_entropy(mg(Variable(on_gpu(x))), on_gpu(y)); });
      }
      EXPECT_EQ(og->t(), oc->t());
      expect_close(og->master_params(), oc->master_params(), 2e-2f, 2e-3f, "masters");
      expect_equal<float>(mg.arena().params().to(kFloat32).to(Device::cpu()),
                          og->master_params().to(dt).to(kFloat32).to(Device::cpu()),
                          "GPU parameters against their rounded masters");
    }
  }
}

}  // namespace
}  // namespace dpl::test
