// A self-contained training demo: an MLP learns to separate two interleaved spirals.
// It needs no data set; the MNIST example (examples/mnist) is the real workload.
#include <cmath>
#include <memory>

#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/train.hpp"

int main() {
  using namespace dpl;
  Generator gen(1);
  const int per_class = 256, classes = 2;
  const std::int64_t n = per_class * classes;
  Tensor x = Tensor::empty({n, 2});
  Tensor y = Tensor::empty({n}, kInt32);
  for (int c = 0; c < classes; ++c) {
    for (int i = 0; i < per_class; ++i) {
      const float r = 0.1f + 0.9f * static_cast<float>(i) / per_class;
      const float a = 3.5f * r + 3.14159265f * static_cast<float>(c) + gen.normal(0.f, 0.08f);
      const std::int64_t row = c * per_class + i;
      x.set<float>({row, 0}, r * std::cos(a));
      x.set<float>({row, 1}, r * std::sin(a));
      y.set<std::int32_t>({row}, c);
    }
  }
  const data::Dataset spirals(x, y);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(2, 64, true, gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(64, 64, true, gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(64, classes, true, gen)});
  optim::Adam opt(1e-2f);
  opt.setup(*model);

  // Full-batch training: every iteration sees all the points.
  data::BatchIterator batches(spirals, n, false);
  train::StandardUpdater updater(batches, opt, [&](const data::Batch& b, train::Observation&) {
    return softmax_cross_entropy((*model)(Variable(b.x)), b.y);
  });
  // An empty output folder keeps the log in memory: the demo writes no files.
  train::Trainer trainer(updater, 400, train::LengthUnit::kIteration, nullptr, "");
  const train::Trigger every_50 = train::Trigger::iterations(50);
  trainer.extend(std::make_shared<train::extensions::Evaluator>(spirals, n), every_50);
  trainer.extend(std::make_shared<train::extensions::LogReport>(), every_50);
  trainer.extend(std::make_shared<train::extensions::PrintReport>(
                     std::vector<std::string>{"iteration", "main/loss", "validation/main/loss", "validation/main/accuracy"}),
                 every_50);
  trainer.run();
  return 0;
}
