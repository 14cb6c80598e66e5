// Model weights in safetensors files (include/dpl/serialize/weights.hpp): parameters and buffers
// by name, loaded in place so that arenas stay bound, and every mismatch rejected before anything
// changes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dpl/dpl.hpp"
#include "support/expect_error.hpp"
#include "support/temp_dir.hpp"

namespace dpl {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using test::TempDir;

// An MLP with buffers beside it, as a model with running statistics has.
class WithStats : public nn::Module {
 public:
  explicit WithStats(std::uint64_t seed) {
    Generator gen(seed);
    mlp_ = register_module("mlp", std::make_shared<nn::MLP>(4, 3, 2, gen));
    mean_ = register_buffer("running_mean", Tensor::uniform({3}, -1.f, 1.f, gen));
    count_ = register_buffer("count", Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(seed)}, {}));
  }
  Variable forward(const Variable& x) override { return (*mlp_)(x); }
  std::shared_ptr<nn::MLP> mlp_;
  Variable mean_, count_;
};

// Every parameter and buffer as (name, tensor), parameters first: what save_weights writes.
std::vector<std::pair<std::string, Tensor>> tensors_of(const nn::Module& m) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, v] : m.named_parameters()) out.emplace_back(name, v.data());
  for (const auto& [name, v] : m.named_buffers()) out.emplace_back(name, v.data());
  return out;
}

// tensors_of(m) with the tensor called name replaced by value, or left out when value is
// undefined; the replacement goes last, after every tensor that loads correctly.
std::vector<std::pair<std::string, Tensor>> tensors_with(const nn::Module& m, const std::string& name, Tensor value) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& entry : tensors_of(m))
    if (entry.first != name) out.push_back(std::move(entry));
  if (value.defined()) out.emplace_back(name, std::move(value));
  return out;
}

// Every parameter and buffer value, by name, on the host.
std::vector<std::pair<std::string, std::vector<float>>> snapshot(const nn::Module& m) {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const auto& [name, t] : tensors_of(m))
    out.emplace_back(name, t.dtype() == kInt64 ? std::vector<float>{static_cast<float>(t.to_vector<std::int64_t>()[0])}
                                               : t.to_vector<float>());
  return out;
}

TEST(Weights, SaveLoadRoundTripCopiesIntoTheBoundTensors) {
  TempDir dir("dpl_weights");
  const std::string path = dir.file("model.safetensors");
  WithStats saved(1);
  serialize::save_weights(saved, path);

  const auto f = serialize::load_safetensors(path);
  std::vector<std::string> names;
  for (const auto& e : f.tensors) names.push_back(e.first);
  EXPECT_THAT(names, ElementsAre("mlp.l1.weight", "mlp.l1.bias", "mlp.l2.weight", "mlp.l2.bias", "mlp.l3.weight",
                                 "mlp.l3.bias", "running_mean", "count"));

  WithStats loaded(2);
  nn::ParameterArena& arena = loaded.arena();
  const std::uint64_t arena_id = arena.id();
  const void* weight_memory = loaded.mlp_->named_parameters()[0].second.data().raw_data();
  const void* mean_memory = loaded.mean_.data().raw_data();
  ASSERT_NE(snapshot(loaded), snapshot(saved));
  serialize::load_weights(loaded, path);
  EXPECT_EQ(snapshot(loaded), snapshot(saved));
  // Same memory, same arena: optimizers bound to the model keep working.
  bool repacked = true;
  EXPECT_EQ(loaded.arena(&repacked).id(), arena_id);
  EXPECT_FALSE(repacked);
  EXPECT_EQ(loaded.mlp_->named_parameters()[0].second.data().raw_data(), weight_memory);
  EXPECT_EQ(loaded.mean_.data().raw_data(), mean_memory);
  EXPECT_EQ(loaded.count_.data().to_vector<std::int64_t>(), std::vector<std::int64_t>{1});
}

TEST(Weights, MissingTensorIsNamedAndTheModelIsUnchanged) {
  TempDir dir("dpl_weights");
  const std::string path = dir.file("partial.safetensors");
  WithStats source(1);
  serialize::save_safetensors(path, tensors_with(source, "running_mean", Tensor()));

  WithStats target(2);
  const auto before = snapshot(target);
  for (bool strict : {true, false}) {
    DPL_EXPECT_ERROR(serialize::load_weights(target, path, strict),
                     AllOf(HasSubstr("load_weights: " + path), HasSubstr("'running_mean' is missing from the file"),
                           HasSubstr("unchanged")));
    EXPECT_EQ(snapshot(target), before);
  }
}

TEST(Weights, ExtraTensorIsAnErrorOnlyWhenStrict) {
  TempDir dir("dpl_weights");
  const std::string path = dir.file("extra.safetensors");
  WithStats source(1);
  serialize::save_safetensors(path, tensors_with(source, "head.weight", Tensor::ones({2, 2})));

  WithStats target(2);
  const auto before = snapshot(target);
  DPL_EXPECT_ERROR(serialize::load_weights(target, path),
                   AllOf(HasSubstr(path), HasSubstr("'head.weight' is in the file but not in the model")));
  EXPECT_EQ(snapshot(target), before);
  serialize::load_weights(target, path, /*strict=*/false);
  EXPECT_EQ(snapshot(target), snapshot(source));
}

// The mis-shaped tensor comes last in the file (see tensors_with), so a loader that copied as it
// checked would already have changed every other tensor.
TEST(Weights, MisShapedOrMisTypedTensorIsNamedAndNothingIsCopied) {
  TempDir dir("dpl_weights");
  const std::string path = dir.file("shapes.safetensors");
  WithStats source(1);
  serialize::save_safetensors(path, tensors_with(source, "running_mean", Tensor::zeros({4})));

  WithStats target(2);
  const auto before = snapshot(target);
  DPL_EXPECT_ERROR(serialize::load_weights(target, path),
                   AllOf(HasSubstr(path), HasSubstr("'running_mean' has shape (4,) in the file but (3,) in the model"),
                         Not(HasSubstr("mlp.l1"))));
  EXPECT_EQ(snapshot(target), before);

  serialize::save_safetensors(path, tensors_with(source, "running_mean", Tensor::zeros({3}, kInt32)));
  DPL_EXPECT_ERROR(serialize::load_weights(target, path),
                   AllOf(HasSubstr("'running_mean' is int32 in the file but float32 in the model")));
  EXPECT_EQ(snapshot(target), before);
}

TEST(Weights, AFileThatIsNotSafetensorsIsNamed) {
  TempDir dir("dpl_weights");
  WithStats target(2);
  const std::string path = dir.file("missing.safetensors");
  DPL_EXPECT_ERROR(serialize::load_weights(target, path), AllOf(HasSubstr(path), HasSubstr("cannot open")));
}

}  // namespace
}  // namespace dpl
