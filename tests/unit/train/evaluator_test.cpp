// train::evaluate: loss and accuracy over a data set or a batch source, in eval mode.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/train.hpp"
#include "support/random_dataset.hpp"

namespace {
using namespace dpl;
using namespace dpl::train;

// Wraps a Linear layer and records the autograd and train modes its forward saw.
class Probe : public nn::Module {
 public:
  explicit Probe(Generator& gen) : inner_(register_module("inner", std::make_shared<nn::Linear>(5, 3, true, gen))) {}
  Variable forward(const Variable& x) override {
    saw_grad = saw_grad || grad_enabled();
    saw_training = saw_training || is_training();
    ++calls;
    return inner_->forward(x);
  }
  bool saw_grad = false;
  bool saw_training = false;
  int calls = 0;

 private:
  std::shared_ptr<nn::Linear> inner_;
};

using test::random_dataset;

TEST(Evaluate, WeightsBatchesBySampleCount) {
  Generator gen(3);
  Probe model(gen);
  const data::Dataset ds = random_dataset(23, 8);
  // The whole set in one batch is the reference.
  const Variable logits = model(Variable(ds.images()));
  const double loss = softmax_cross_entropy(logits, ds.labels()).item();
  const double acc = accuracy(logits, ds.labels()).item();
  model.saw_grad = false;
  model.saw_training = false;
  model.calls = 0;

  const EvalResult r = evaluate(model, ds, 5);  // 5+5+5+5+3
  EXPECT_EQ(model.calls, 5);
  EXPECT_EQ(r.samples, 23);
  EXPECT_NEAR(r.loss, loss, 1e-6 * std::abs(loss));
  EXPECT_EQ(std::lround(acc * 23), std::lround(r.accuracy * 23));
  EXPECT_EQ(std::round(r.accuracy * 23), r.accuracy * 23);  // a whole number of samples
  EXPECT_FALSE(model.saw_grad);
  EXPECT_FALSE(model.saw_training);
  EXPECT_TRUE(model.is_training());  // restored

  // Two uneven shards, weighted by their sizes, give the same means.
  const EvalResult a = evaluate(model, ds.slice(0, 4), 3);
  const EvalResult b = evaluate(model, ds.slice(4, 19), 3);
  EXPECT_NEAR((a.loss * 4 + b.loss * 19) / 23, r.loss, 1e-6 * std::abs(loss));
  EXPECT_NEAR((a.accuracy * 4 + b.accuracy * 19) / 23, r.accuracy, 1e-12);
}

TEST(Evaluate, KeepsEvalModeAndRejectsBadInput) {
  Generator gen(3);
  Probe model(gen);
  model.eval();
  evaluate(model, random_dataset(4, 1), 2);
  EXPECT_FALSE(model.is_training());
  EXPECT_THROW(evaluate(model, random_dataset(4, 1), 0), dpl::Error);
  EXPECT_THROW(evaluate(model, data::Dataset(), 2), dpl::Error);
  // A model that throws still gets its mode back.
  model.train();
  const data::Dataset wrong(Tensor::zeros({2, 4}), Tensor::zeros({2}, kInt32));
  EXPECT_THROW(evaluate(model, wrong, 2), dpl::Error);
  EXPECT_TRUE(model.is_training());
}

TEST(Evaluate, OverABatchSourceMatchesTheDataSet) {
  Generator gen(3);
  Probe model(gen);
  const data::Dataset ds = random_dataset(23, 8);
  const EvalResult reference = evaluate(model, ds, 5);
  data::BatchIterator source(ds, 5, /*shuffle=*/false, 0, /*repeat=*/false);
  model.calls = 0;
  const EvalResult r = evaluate(model, source, source.batches_per_epoch());
  EXPECT_EQ(model.calls, 5);
  EXPECT_EQ(r.samples, 23);
  EXPECT_EQ(r.loss, reference.loss);  // the same batches, the same sums
  EXPECT_EQ(r.accuracy, reference.accuracy);
  EXPECT_TRUE(model.is_training());
  // No batches and no other rank: nothing to evaluate.
  EXPECT_THROW(evaluate(model, source, 0), dpl::Error);
  EXPECT_THROW(evaluate(model, source, -1), dpl::Error);
}

}  // namespace
