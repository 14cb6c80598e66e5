// Exporting and restoring optimizer state (Optimizer::state, state_scalars, load_state): a run
// stopped half way, saved (weights and state through safetensors files), restored into fresh
// objects and continued must end bit-identical to the run that was never stopped.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/temp_dir.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr std::int64_t kBatch = 16, kIn = 4, kUnits = 8, kOut = 3;

struct Problem {
  Tensor x, y;
};

Problem make_problem() {
  Generator gen(3);
  Problem p{Tensor::normal({kBatch, kIn}, 0.f, 1.f, gen), Tensor::empty({kBatch}, kInt32)};
  for (std::int64_t i = 0; i < kBatch; ++i) p.y.set<std::int32_t>({i}, static_cast<std::int32_t>(gen.below(kOut)));
  return p;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& kind) {
  std::unique_ptr<optim::Optimizer> opt;
  if (kind == "sgd") opt = std::make_unique<optim::SGD>(0.1f);
  if (kind == "momentum") opt = std::make_unique<optim::MomentumSGD>(0.05f, 0.9f);
  if (kind == "adam") opt = std::make_unique<optim::Adam>(0.01f);
  if (kind == "adamw") opt = std::make_unique<optim::AdamW>(optim::AdamWOptions(0.01f));
  if (kind == "rmsprop")
    opt = std::make_unique<optim::RMSprop>(optim::RMSpropOptions(0.01f).momentum(0.5f).centered(true));
  if (kind == "adagrad")
    opt = std::make_unique<optim::Adagrad>(optim::AdagradOptions(0.05f).lr_decay(0.1f).initial_accumulator_value(0.1f));
  if (kind == "lamb") opt = std::make_unique<optim::LAMB>(optim::LAMBOptions(0.01f));
  if (kind == "lars") opt = std::make_unique<optim::LARS>(optim::LARSOptions(0.1f).exclude_one_dimensional());
  opt->set_weight_decay(1e-3f);
  return opt;
}

// A warmup, then decay: the rate depends on t, so a restored t that were off would show.
const optim::LinearWarmup kSchedule = optim::with_warmup(optim::StepDecay(0.05, 0.5, 2), 0.005, 2);

void train(nn::Module& model, optim::Optimizer& opt, const Problem& p, int steps) {
  for (int i = 0; i < steps; ++i) {
    kSchedule.apply(opt, opt.t());
    opt.update([&] { return softmax_cross_entropy(model(Variable(p.x)), p.y); });
  }
}

std::vector<std::vector<float>> values_of(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<std::vector<float>> out;
  for (const auto& entry : tensors) out.push_back(entry.second.to_vector<float>());
  return out;
}

std::vector<std::vector<float>> params_of(const nn::Module& m) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, v] : m.named_parameters()) tensors.emplace_back(name, v.data());
  return values_of(tensors);
}

class ResumeBitIdentical : public ::testing::TestWithParam<std::string> {};

TEST_P(ResumeBitIdentical, RestoredRunMatchesTheUninterruptedOne) {
  const Problem p = make_problem();
  test::TempDir dir("dpl_optimizer_state");

  Generator gen_a(5);
  nn::MLP uninterrupted(kUnits, kIn, kOut, gen_a);
  auto opt_a = make_optimizer(GetParam());
  opt_a->setup(uninterrupted);
  train(uninterrupted, *opt_a, p, 6);

  Generator gen_b(5);
  nn::MLP first_half(kUnits, kIn, kOut, gen_b);
  auto opt_b = make_optimizer(GetParam());
  opt_b->setup(first_half);
  train(first_half, *opt_b, p, 3);
  serialize::save_weights(first_half, dir.file("weights.safetensors"));
  serialize::save_safetensors(dir.file("optimizer.safetensors"), opt_b->state());
  const std::map<std::string, double> scalars = opt_b->state_scalars();

  // Fresh objects, other initial weights: everything must come from the files and the scalars.
  Generator gen_c(99);
  nn::MLP resumed(kUnits, kIn, kOut, gen_c);
  auto opt_c = make_optimizer(GetParam());
  opt_c->setup(resumed);
  serialize::load_weights(resumed, dir.file("weights.safetensors"));
  opt_c->load_state(serialize::load_safetensors(dir.file("optimizer.safetensors")).tensors, scalars);
  EXPECT_EQ(opt_c->t(), 3);
  EXPECT_EQ(opt_c->lr(), opt_b->lr());
  EXPECT_EQ(opt_c->weight_decay(), 1e-3f);
  train(resumed, *opt_c, p, 3);

  EXPECT_EQ(opt_c->t(), opt_a->t());
  EXPECT_EQ(opt_c->lr(), opt_a->lr());
  EXPECT_EQ(params_of(resumed), params_of(uninterrupted));  // exact float equality
  EXPECT_EQ(values_of(opt_c->state()), values_of(opt_a->state()));
  EXPECT_EQ(opt_c->state_scalars(), opt_a->state_scalars());
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ResumeBitIdentical, ::testing::Values("sgd", "momentum", "adam", "adamw", "rmsprop",
                                                                             "adagrad", "lamb", "lars"));

TEST(OptimizerState, ScalarsOfEachOptimizer) {
  using ::testing::UnorderedElementsAre;
  EXPECT_THAT(optim::SGD(0.5f).state_scalars(),
              UnorderedElementsAre(Pair("t", 0.0), Pair("lr", 0.5), Pair("weight_decay", 0.0)));
  EXPECT_THAT(optim::MomentumSGD(0.25f, 0.5f).state_scalars(),
              UnorderedElementsAre(Pair("t", 0.0), Pair("lr", 0.25), Pair("weight_decay", 0.0), Pair("momentum", 0.5)));
  EXPECT_THAT(optim::Adam(0.125f, 0.5f, 0.75f, 0.25f).state_scalars(),
              UnorderedElementsAre(Pair("t", 0.0), Pair("lr", 0.125), Pair("weight_decay", 0.0), Pair("beta1", 0.5),
                                   Pair("beta2", 0.75), Pair("eps", 0.25), Pair("moment_steps", 0.0)));
}

// An Adam after two steps, and the state it exports, for the error cases below.
struct Trained {
  Generator gen{1};
  nn::MLP model{kUnits, kIn, kOut, gen};
  optim::Adam opt{0.01f};
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, double> scalars;
  Trained() {
    opt.setup(model);
    train(model, opt, make_problem(), 2);
    for (const auto& [name, t] : opt.state()) tensors.emplace_back(name, t.clone());
    scalars = opt.state_scalars();
  }
};

TEST(OptimizerState, BadStateIsNamedAndChangesNothing) {
  Trained source;
  Trained target;  // same model, its own state: any change would show against its snapshot
  train(target.model, target.opt, make_problem(), 1);
  const auto before_tensors = values_of(target.opt.state());
  const auto before_scalars = target.opt.state_scalars();
  auto expect_unchanged = [&] {
    EXPECT_EQ(values_of(target.opt.state()), before_tensors);
    EXPECT_EQ(target.opt.state_scalars(), before_scalars);
  };

  auto tensors = source.tensors;
  tensors.pop_back();
  DPL_EXPECT_ERROR(target.opt.load_state(tensors, source.scalars), HasSubstr("missing state tensor 'v'"));
  expect_unchanged();

  tensors = source.tensors;
  tensors.emplace_back("velocity", source.tensors[0].second);
  DPL_EXPECT_ERROR(target.opt.load_state(tensors, source.scalars), HasSubstr("unexpected state tensor 'velocity'"));
  expect_unchanged();

  tensors = source.tensors;
  tensors[1].second = Tensor::zeros({3});
  DPL_EXPECT_ERROR(target.opt.load_state(tensors, source.scalars),
                   AllOf(HasSubstr("state tensor 'v' must be float32 of shape"), HasSubstr("got float32 of shape (3,)")));
  expect_unchanged();

  // One scalar changed (nullopt: removed), and what the error must say.
  struct ScalarCase {
    const char* key;
    std::optional<double> value;
    const char* message;
  };
  const ScalarCase cases[] = {
      {"moment_steps", std::nullopt, "missing state scalar 'moment_steps'"},
      {"momentum", 0.9, "unexpected state scalar 'momentum'"},
      {"t", 2.5, "expected \"t\" to be a whole number >= 0, got 2.5"},
      {"moment_steps", -1, "Adam::load_state: expected \"moment_steps\" to be a whole number >= 0, got -1"},
      {"lr", -0.5, "expected \"lr\" to be finite and >= 0, got -0.5"},
      {"beta1", 0.5, "Adam::load_state: the state was saved with beta1 = 0.5, but this optimizer has beta1 = 0.9"},
  };
  for (const ScalarCase& c : cases) {
    SCOPED_TRACE(c.message);
    auto scalars = source.scalars;
    if (c.value) {
      scalars[c.key] = *c.value;
    } else {
      scalars.erase(c.key);
    }
    DPL_EXPECT_ERROR(target.opt.load_state(source.tensors, scalars), HasSubstr(c.message));
    expect_unchanged();
  }

  // The good state still loads afterwards.
  target.opt.load_state(source.tensors, source.scalars);
  EXPECT_EQ(values_of(target.opt.state()), values_of(source.tensors));
  EXPECT_EQ(target.opt.state_scalars(), source.scalars);
}

TEST(OptimizerState, LoadNeedsSetupAndMatchingSettings) {
  optim::Adam fresh;
  DPL_EXPECT_ERROR(fresh.load_state({}, fresh.state_scalars()), HasSubstr("setup"));

  Generator gen(1);
  nn::MLP model(kUnits, kIn, kOut, gen);
  optim::MomentumSGD saved(0.1f, 0.9f), other(0.1f, 0.5f);
  saved.setup(model);
  other.setup(model);
  DPL_EXPECT_ERROR(other.load_state(saved.state(), saved.state_scalars()),
                   HasSubstr("MomentumSGD::load_state: the state was saved with momentum = 0.9"));
}

}  // namespace
}  // namespace dpl
