// dist_non_finite_probe: train_mnist's setup (an MLP, Adam, a StandardUpdater and a Trainer with
// its reports) on a small synthetic data set in which one pixel of one sample is NaN, on rank 1
// only (on the one process when run alone). The non-finite check must stop the run at the
// iteration that reads that sample, on every rank, with a message naming the iteration, the rank
// and the parameter (checked by run_abort_probe.cmake).
//
//   dist_non_finite_probe dist     under mpiexec: a MultiNodeOptimizer over "hierarchical"
//   dist_non_finite_probe single   one process, no communicator
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <utility>

#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"
#include "dpl/train.hpp"

namespace {
using namespace dpl;

constexpr std::int64_t kSamples = 64, kFeatures = 20, kClasses = 4, kBatch = 8;
// The poisoned sample is the first of the third batch (the iterator does not shuffle): the run
// must stop at iteration 3, after two good ones.
constexpr std::int64_t kPoisoned = 2 * kBatch;

data::Dataset make_data(bool poison) {
  Generator gen(11);
  Tensor x = Tensor::uniform({kSamples, kFeatures}, 0.f, 1.f, gen);
  Tensor y = Tensor::empty({kSamples}, kInt32);
  for (std::int64_t i = 0; i < kSamples; ++i) y.set<std::int32_t>({i}, static_cast<std::int32_t>(i % kClasses));
  if (poison) x.set<float>({kPoisoned, 5}, std::numeric_limits<float>::quiet_NaN());
  return data::Dataset(x, y);
}

void run_training(optim::Optimizer& optimizer, nn::Module& model, bool poison,
                  std::shared_ptr<comm::Communicator> comm) {
  data::BatchIterator batches(make_data(poison), kBatch, false);
  train::StandardUpdater updater(batches, optimizer, [&](const data::Batch& b, train::Observation& observation) {
    const Variable logits = model(Variable(b.x));
    observation.observe("main/accuracy", accuracy(logits, b.y));
    return softmax_cross_entropy(logits, b.y);
  });
  train::Trainer trainer(updater, 2, train::LengthUnit::kEpoch, std::move(comm), "");
  trainer.extend(std::make_shared<train::extensions::LogReport>(), train::Trigger::iterations(1));
  trainer.extend(std::make_shared<train::extensions::PrintReport>());
  trainer.run();
}

}  // namespace

int main(int argc, char** argv) {
  const bool single = argc > 1 && std::strcmp(argv[1], "single") == 0;
  if (single) {
    try {
      Generator init(3);
      nn::MLP model(16, kFeatures, kClasses, init);
      optim::Adam optimizer;
      optimizer.setup(model);
      run_training(optimizer, model, true, nullptr);
    } catch (const std::exception& e) {
      std::cerr << "error: " << e.what() << "\n";
      return 1;
    }
    std::cerr << "the poisoned run finished without an error\n";
    return 0;
  }
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator("hierarchical");
  try {
    Generator init(3);
    nn::MLP model(16, kFeatures, kClasses, init);
    auto optimizer = parallel::create_multi_node_optimizer(std::make_unique<optim::Adam>(), comm);
    optimizer->setup(model);
    run_training(*optimizer, model, comm->rank() == 1, comm);
  } catch (const std::exception& e) {
    comm::abort_all(e.what());
  }
  // Reaching here means the NaN went unnoticed: fail the job so that the test says so.
  comm::abort_all("the poisoned run finished without an error");
}
