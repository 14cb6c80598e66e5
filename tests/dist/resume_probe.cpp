// dist_resume_probe: a small data-parallel run on the Trainer (shuffled batches per rank, a
// warmup-then-cosine schedule, clipping, input noise from a generator of its own), driven by
// run_resume_probe.cmake, which runs it uninterrupted and as two jobs — stop and checkpoint,
// then resume in a new process group — and compares the final weights files byte for byte.
//
//   dist_resume_probe <communicator> <iterations> <out folder> [resume checkpoint]
//
// It trains until <iterations>, writes a checkpoint there (<out>/snapshot_iter_<iterations>.
// safetensors) and the final weights (<out>/final.safetensors) from rank 0.
#include <cstdlib>
#include <memory>
#include <string>

#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"
#include "dpl/train.hpp"

int main(int argc, char** argv) {
  using namespace dpl;
  if (argc < 4) {
    std::fprintf(stderr, "usage: dist_resume_probe <communicator> <iterations> <out folder> [resume checkpoint]\n");
    return 2;
  }
  const std::string out = argv[3];
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator(argv[1]);
  const int rank = comm->rank();

  // 90 samples of 6 features in 3 classes; each rank trains on its third or half of them.
  constexpr std::int64_t kSamples = 90, kIn = 6, kClasses = 3;
  Generator data_gen(5);
  const Tensor x = Tensor::normal({kSamples, kIn}, 0.f, 1.f, data_gen);
  Tensor y = Tensor::empty({kSamples}, kInt32);
  for (std::int64_t i = 0; i < kSamples; ++i)
    y.set<std::int32_t>({i}, static_cast<std::int32_t>(data_gen.below(kClasses)));
  const std::int64_t share = kSamples / comm->size();
  const data::Dataset shard(x.narrow(0, rank * share, share).contiguous(), y.narrow(0, rank * share, share).contiguous());

  Generator init(100 + static_cast<std::uint64_t>(rank));  // setup() replaces them with rank 0's
  nn::MLP model(16, kIn, kClasses, init);
  auto optimizer = parallel::create_multi_node_optimizer(std::make_unique<optim::Adam>(), comm);
  optimizer->setup(model);
  optim::clip_gradients(*optimizer, 1.0);

  data::BatchIterator batches(shard, 8, true, 1000 + static_cast<std::uint64_t>(rank));
  Generator noise(7 + static_cast<std::uint64_t>(rank));
  train::StandardUpdater updater(batches, *optimizer, [&](const data::Batch& b, train::Observation& observation) {
    const Variable noisy = Variable(b.x) + Variable(Tensor::normal(b.x.shape(), 0.f, 0.05f, noise));
    const Variable logits = model(noisy);
    observation.observe("main/accuracy", accuracy(logits, b.y));
    return softmax_cross_entropy(logits, b.y);
  });
  const std::int64_t iterations = std::atoll(argv[2]);
  train::Trainer trainer(updater, iterations, train::LengthUnit::kIteration, comm, out);
  trainer.add_generator("noise", noise);
  trainer.extend(std::make_shared<train::extensions::LrScheduler>(
      optim::with_warmup(optim::CosineAnnealing(0.01, 0.001, 30), 0.001, 5)));
  trainer.extend(std::make_shared<train::extensions::LogReport>(), train::Trigger::iterations(4));
  trainer.extend(std::make_shared<train::extensions::Snapshot>("", 2), train::Trigger::end());
  if (argc > 4) trainer.resume(argv[4]);
  trainer.run();
  if (rank == 0) serialize::save_weights(model, out + "/final.safetensors");
  return 0;
}
