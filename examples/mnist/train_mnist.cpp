// Data-parallel training of ChainerMN's MNIST MLP (784-1000-1000-10, Adam) on Fashion-MNIST.
//
//   mpiexec -n 2 --bind-to none train_mnist [-b 100] [-e 20] [-u 1000] [-g] [-o result]
//                                           [--communicator hierarchical] [--data DIR]
//                                           [--snapshot-every N] [--resume PATH]
//                                           [--non-finite stop|skip|off]
//                                           [--overlap] [--bucket-mb 25] [--first-bucket-mb 1]
//                                           [--graph] [--zero 0|1|2]
//
// Rank 0 reads the data set and gives every rank all of it; the ranks draw their shares of each
// global batch (-b per process) from one order of the whole set, a function of the seed and the
// epoch, so a checkpoint resumes on another number of processes with the same global batch
// (--resume; docs/training-state.md). Evaluation runs on scattered shards of the test set. Every
// rank trains with a MultiNodeOptimizer driven by a Trainer; rank 0 prints Chainer's report table and progress bar
// and, at the end, the phase-timer summary across ranks. A NaN or Inf gradient on any rank stops
// every rank with the iteration, the rank(s) and the parameter (--non-finite: docs/reliability.md).
// Ranks started with different flags are refused at the start, naming the flag and each rank's
// value; a rank that stops taking part is reported by the collective watchdog
// (DPL_COLLECTIVE_TIMEOUT, docs/reliability.md).
#include <CLI/CLI.hpp>

#include <iostream>
#include <limits>
#include <memory>
#include <optional>

#include "../common/flags.hpp"
#include "../common/launch.hpp"
#include "../common/memory_check.hpp"
#include "../common/optimizer_state.hpp"
#include "../common/resume.hpp"
#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"
#include "dpl/train.hpp"

namespace {
using namespace dpl;

constexpr std::int32_t kClasses = 10;

struct Options {
  std::int64_t batchsize = 100;
  bool batchsize_given = false;  // -b on the command line (a resumed run otherwise takes the checkpoint's)
  std::int64_t epochs = 20;
  std::int64_t units = 1000;
  bool gpu = false;
  std::string out = "result";
  std::string communicator = "hierarchical";
  std::string data = data::kDefaultMnistDir;
  std::uint64_t seed = 0;
  bool sync_timing = false;
  parallel::OverlapOptions overlap;
  int zero = 0;  // ZeRO stage: 1 and 2 keep Adam's state for 1/p of the parameters per rank
  bool trace = false;
  bool graph = false;
  std::int64_t snapshot_every = 0;
  std::int64_t keep = 1;
  std::string resume;
  optim::NonFinitePolicy non_finite = optim::NonFinitePolicy::kStop;
};

using examples::BadFlag;
using examples::parse_whole;

// The estimate for nn::MLP (inputs -> units -> units -> classes, ReLU between) in float32 under
// Adam: parameters, gradients, two moments each; per sample, each layer's output and its ReLU
// (and the input) kept for backward, with as many gradients.
examples::MemoryEstimate mlp_memory(std::int64_t inputs, std::int64_t units, std::int64_t batch) {
  const auto in = static_cast<std::uint64_t>(inputs), u = static_cast<std::uint64_t>(units);
  const std::uint64_t params = in * u + u + u * u + u + u * kClasses + kClasses;
  const std::uint64_t per_sample = in + 4 * u + kClasses;
  examples::MemoryEstimate e;
  e.parameters = 4 * params;
  e.gradients = 4 * params;
  e.optimizer_state = 8 * params;
  e.activations = 2 * 4 * per_sample * static_cast<std::uint64_t>(batch);
  return e;
}

int run(const Options& o) {
  // Ranks started with different communicators are refused here, naming each rank's choice.
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator(o.communicator);
  const bool root = comm->rank() == 0;
  // Ranks started with different flags would run different numbers of steps (or different
  // collectives) and wait for each other forever: refuse that now, naming the flag and the ranks.
  // --data and -o are read or written by rank 0 alone; --trace only names each rank's own file.
  comm::check_settings_agree(*comm,
                             {{"batch size (-b)", std::to_string(o.batchsize)},
                              {"epochs (-e)", std::to_string(o.epochs)},
                              {"units (-u)", std::to_string(o.units)},
                              {"gpu (-g)", o.gpu ? "on" : "off"},
                              {"communicator (--communicator)", o.communicator},
                              {"seed (--seed)", std::to_string(o.seed)},
                              {"synchronized timing (--sync-timing)", o.sync_timing ? "on" : "off"},
                              {"snapshot interval (--snapshot-every)", std::to_string(o.snapshot_every)},
                              {"resumed checkpoint (--resume)", o.resume},
                              {"non-finite policy (--non-finite)", optim::to_string(o.non_finite)},
                              {"graph capture (--graph)", o.graph ? "on" : "off"},
                              // The buckets are the collectives: ranks that cut them differently never meet.
                              {"overlap (--overlap)", o.overlap.enabled ? "on" : "off"},
                              {"ZeRO stage (--zero)", std::to_string(o.zero)},
                              {"bucket bytes (--bucket-mb)", std::to_string(o.overlap.bucket_bytes)},
                              {"first bucket bytes (--first-bucket-mb)", std::to_string(o.overlap.first_bucket_bytes)}},
                             "train_mnist");

  const Device device = examples::device_for_rank(o.gpu, *comm);
  const std::int64_t global_batch = examples::resumed_global_batch("train_mnist", "-b", o.batchsize,
                                                                   o.batchsize_given, o.resume, comm->size());
  const std::int64_t batchsize = global_batch / comm->size();

  if (root) {
    std::cout << "==========================================\n"
              << "Num process (COMM_WORLD): " << comm->size() << "\n"
              << (o.gpu ? "Using GPUs\n" : "")
              << "Using " << o.communicator << " communicator\n"
              << "Num unit: " << o.units << "\n"
              << "Num Minibatch-size: " << batchsize << " (global " << global_batch << ")\n"
              << "Num epoch: " << o.epochs << "\n"
              << "==========================================" << std::endl;
  }

  // Rank 0 reads the files; every rank gets the whole training set, whose one order all ranks
  // share, and a shard of the test set (exact, not padded, for evaluation).
  data::Dataset train_all, test_all;
  if (root) {
    train_all = data::load_mnist(o.data, "train");
    test_all = data::load_mnist(o.data, "test");
    // Labels are checked here, once: on the GPU the loss does not read them back every step.
    for (const auto* set : {&train_all, &test_all}) {
      const std::vector<std::int32_t> labels = set->labels().to_vector<std::int32_t>();
      for (std::size_t i = 0; i < labels.size(); ++i) {
        DPL_CHECK(labels[i] >= 0 && labels[i] < kClasses, "train_mnist: expected labels in [0, ", kClasses,
                  "), got ", labels[i], " at index ", i, " of ", o.data, "/",
                  set == &train_all ? "train" : "t10k", "-labels-idx1-ubyte (or its .gz)");
      }
    }
  }
  if (root) {
    // Train and test images of different shapes would pass the first epoch and fail in its
    // evaluation: refused now, naming both. load_mnist flattens each image into its pixels.
    DPL_CHECK(train_all.sample_shape() == test_all.sample_shape(), "train_mnist: the training images (", o.data,
              "/train-images-idx3-ubyte or its .gz) have ", train_all.sample_numel(),
              " pixels each, but the test images (", o.data, "/t10k-images-idx3-ubyte or its .gz) have ",
              test_all.sample_numel(), "; expected images of one shape in both");
  }
  const data::Dataset train = data::broadcast_dataset(train_all, *comm);
  const data::Dataset test = data::scatter_dataset(test_all, *comm, true, o.seed + 1, false);
  train_all = test_all = data::Dataset();
  // Every rank holds the whole set, so every rank reaches the same verdict and none is left waiting.
  const std::int64_t share = train.size() / comm->size();
  DPL_CHECK(global_batch <= train.size(), "-b ", batchsize, " is larger than each process's share of the training "
            "set (", share, " of its ", train.size(), " samples on each of ", comm->size(), " processes); a global "
            "batch would repeat samples, so use -b ", share, " or less");

  // The MLP's parameters are allocated next: first check that they, Adam's state and a step fit.
  examples::check_memory_fits(mlp_memory(train.sample_numel(), o.units, batchsize), device, comm->host_size(),
                              "train_mnist", "lower -u (units per hidden layer) or -b (batch size)");
  Generator init(o.seed);
  nn::MLP model(o.units, train.sample_numel(), kClasses, init);
  model.to(device);
  auto optimizer = parallel::create_multi_node_optimizer(
      std::make_unique<optim::Adam>(), comm,
      o.sync_timing ? profile::TimingMode::kSynchronized : profile::TimingMode::kNonIntrusive);
  optimizer->set_non_finite_policy(o.non_finite);
  optimizer->set_overlap(o.overlap);
  optimizer->set_zero_stage(o.zero);
  optimizer->setup(model);
  examples::print_optimizer_state_bytes(*optimizer);

  // One order for the job (its seed is recorded and checked on resume); each rank takes its share.
  data::GlobalBatchIterator batches(train, global_batch, comm->rank(), comm->size(), true, o.seed);
  train::StandardUpdater updater(batches, *optimizer, [&](const data::Batch& b, train::Observation& observation) {
    const Variable logits = model(Variable(b.x));
    observation.observe("main/accuracy", accuracy(logits, b.y));
    return softmax_cross_entropy(logits, b.y);
  }, device);
  if (o.graph) updater.set_graph_capture(true);

  train::Trainer trainer(updater, train::TrainerOptions(o.epochs, train::LengthUnit::kEpoch).communicator(comm).out(o.out));
  trainer.extend(std::make_shared<train::extensions::Evaluator>(test, batchsize));
  trainer.extend(std::make_shared<train::extensions::LogReport>());
  trainer.extend(std::make_shared<train::extensions::PrintReport>());
  trainer.extend(std::make_shared<train::extensions::ProgressBar>());
  trainer.extend(std::make_shared<train::extensions::PhaseSummary>());
  if (o.snapshot_every > 0)
    trainer.extend(std::make_shared<train::extensions::Snapshot>("", o.keep), train::Trigger::epochs(o.snapshot_every));
  if (!o.resume.empty()) trainer.resume(o.resume);
  trainer.run();

  if (o.trace) {
    optimizer->timer().write_chrome_trace(o.out + "/trace_rank" + std::to_string(comm->rank()) + ".json",
                                          comm->rank());
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string batchsize = "100", epochs = "20", units = "1000", seed = "0", snapshot_every = "0", keep = "1";
  std::string non_finite = "stop", bucket_mb = "25", first_bucket_mb = "1", zero = "0";
  bool shard_state = false;
  CLI::App app{"Data-parallel MNIST MLP training with dpl (ChainerMN's example)"};
  app.add_option("-b,--batchsize", batchsize,
                 "Number of images in each mini-batch (per process; with --resume, default: the checkpoint's global "
                 "batch divided among the processes)");
  app.add_option("-e,--epoch", epochs, "Number of sweeps over the data set to train");
  app.add_option("-u,--unit", units, "Number of units in each hidden layer");
  app.add_flag("-g,--gpu", o.gpu, "Train on GPUs (one per process, chosen by the rank within the node)");
  app.add_option("-o,--out", o.out, "Directory to output the result");
  app.add_option("--communicator", o.communicator, "Type of communicator");
  app.add_option("--data", o.data, "Folder of the MNIST-format files (Fashion-MNIST by default)");
  app.add_option("--seed", seed, "Seed for initialisation and shuffling");
  app.add_flag("--sync-timing", o.sync_timing, "Barriers between phases for clean phase times");
  app.add_flag("--overlap", o.overlap.enabled, "Average each bucket of gradients while backward still runs");
  app.add_option("--zero", zero,
                 "ZeRO stage: 0 off; 1 keeps Adam's state for 1/p of the parameters on each rank (reduce-scatter, "
                 "update, allgather); 2 also reduce-scatters the gradients bucket by bucket (during backward with "
                 "--overlap)");
  app.add_flag("--shard-optimizer-state", shard_state, "The same as --zero 1");
  app.add_option("--bucket-mb", bucket_mb, "Megabytes (MiB) of gradients per overlapped bucket");
  app.add_option("--first-bucket-mb", first_bucket_mb, "MiB of the first bucket, the one backward finishes first");
  app.add_flag("--trace", o.trace, "Write a Chrome trace of the phases per rank into the output folder");
  app.add_flag("--graph", o.graph, "Record the training step as a CUDA graph and replay it (-g, one process)");
  app.add_option("--snapshot-every", snapshot_every, "Write a checkpoint into the output folder every N epochs (0: never)");
  app.add_option("--keep", keep, "Number of the newest checkpoints to keep");
  app.add_option("--resume", o.resume, "Continue the run saved in this checkpoint file");
  app.add_option("--non-finite", non_finite, "What a step with an Inf or NaN gradient does: stop, skip or off");
  CLI11_PARSE(app, argc, argv);
  o.batchsize_given = app.count("-b") > 0;
  try {
    constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    o.batchsize = static_cast<std::int64_t>(parse_whole("-b", batchsize, 1, std::uint64_t{1} << 31));
    o.epochs = static_cast<std::int64_t>(parse_whole("-e", epochs, 1, 1000000));
    o.units = static_cast<std::int64_t>(parse_whole("-u", units, 1, 65536));
    o.seed = parse_whole("--seed", seed, 0, kMax);
    o.snapshot_every = static_cast<std::int64_t>(parse_whole("--snapshot-every", snapshot_every, 0, 1000000));
    o.keep = static_cast<std::int64_t>(parse_whole("--keep", keep, 1, 1000000));
    const double mib = 1024.0 * 1024.0;
    o.overlap.bucket_bytes = static_cast<std::size_t>(examples::parse_real("--bucket-mb", bucket_mb, 1e-6, 1e6) * mib);
    o.overlap.first_bucket_bytes =
        static_cast<std::size_t>(examples::parse_real("--first-bucket-mb", first_bucket_mb, 1e-6, 1e6) * mib);
    o.zero = examples::parse_zero_stage(zero, shard_state, o.overlap.enabled);
    if (o.out.empty()) throw BadFlag{"-o must name an output folder, got an empty string"};
    bool known = false;
    for (auto p : {optim::NonFinitePolicy::kStop, optim::NonFinitePolicy::kSkip, optim::NonFinitePolicy::kOff}) {
      if (non_finite == optim::to_string(p)) {
        o.non_finite = p;
        known = true;
      }
    }
    if (!known) throw BadFlag{"--non-finite must be stop, skip or off, got '" + non_finite + "'"};
    if (o.graph && !o.gpu) throw BadFlag{"--graph records the step as a CUDA graph and needs -g"};
  } catch (const BadFlag& e) {
    std::cerr << "train_mnist: " << e.message << "\n";
    return 2;
  }
  return examples::run_or_abort(o.out, [&] { return run(o); });
}
