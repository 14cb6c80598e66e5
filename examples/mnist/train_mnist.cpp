// Data-parallel training of ChainerMN's MNIST MLP (784-1000-1000-10, Adam) on Fashion-MNIST.
//
//   mpiexec -n 2 --bind-to none train_mnist [-b 100] [-e 20] [-u 1000] [-g] [-o result]
//                                           [--communicator hierarchical] [--data DIR]
//
// Rank 0 reads the data set and scatters shards; every rank trains on its shard with a
// MultiNodeOptimizer; rank 0 prints Chainer's report table and progress bar and, at the end, the
// phase-timer summary across ranks.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "dpl/core/cuda.hpp"
#include "dpl/data.hpp"
#include "dpl/dpl.hpp"
#include "dpl/parallel.hpp"
#include "dpl/train.hpp"

namespace {
using namespace dpl;

constexpr std::int32_t kClasses = 10;

struct Options {
  std::int64_t batchsize = 100;
  std::int64_t epochs = 20;
  std::int64_t units = 1000;
  bool gpu = false;
  std::string out = "result";
  std::string communicator = "hierarchical";
  std::string data = data::kDefaultMnistDir;
  std::uint64_t seed = 0;
  bool sync_timing = false;
  bool trace = false;
};

// Sums of a running epoch, kept on the model's device so that no iteration waits for the GPU.
struct EpochSums {
  Tensor loss, accuracy;
  std::int64_t count = 0;
  void add(const Tensor& l, const Tensor& a) {
    NoGradGuard no_grad;
    loss = loss.defined() ? dpl::add(Variable(loss), Variable(l)).data() : l.clone();
    accuracy = accuracy.defined() ? dpl::add(Variable(accuracy), Variable(a)).data() : a.clone();
    ++count;
  }
  std::pair<double, double> take_means() {
    const double n = static_cast<double>(count);
    const std::pair<double, double> m{loss.item() / n, accuracy.item() / n};
    loss = accuracy = Tensor();
    count = 0;
    return m;
  }
};

int run(const Options& o) {
  std::shared_ptr<comm::Communicator> comm = comm::create_communicator(o.communicator);
  const bool root = comm->rank() == 0;

  Device device = Device::cpu();
  if (o.gpu) {
    DPL_CHECK(DPL_WITH_CUDA, "--gpu was given, but this build of dpl has no CUDA backend "
                             "(rebuild on a machine with the CUDA toolkit)");
    // By the rank on the physical machine: virtual nodes (DPL_RANKS_PER_NODE) share its GPUs.
    const int index = cuda::select_device_for_local_rank(comm->host_rank());
    DPL_CHECK(index >= 0, "--gpu was given, but rank ", comm->rank(), " finds no CUDA device");
    device = Device::cuda(index);
  }

  if (root) {
    std::cout << "==========================================\n"
              << "Num process (COMM_WORLD): " << comm->size() << "\n"
              << (o.gpu ? "Using GPUs\n" : "")
              << "Using " << o.communicator << " communicator\n"
              << "Num unit: " << o.units << "\n"
              << "Num Minibatch-size: " << o.batchsize << "\n"
              << "Num epoch: " << o.epochs << "\n"
              << "==========================================" << std::endl;
  }

  // Rank 0 reads the files; everyone gets a shard. Training shards are padded to equal length
  // (every rank runs the same number of iterations); test shards are exact for evaluation.
  data::Dataset train_all, test_all;
  if (root) {
    train_all = data::load_mnist(o.data, "train");
    test_all = data::load_mnist(o.data, "test");
    // Labels are checked here, once: on the GPU the loss does not read them back every step.
    for (const auto* set : {&train_all, &test_all}) {
      for (std::int32_t label : set->labels().to_vector<std::int32_t>()) {
        DPL_CHECK(label >= 0 && label < kClasses, "train_mnist: expected labels in [0, ", kClasses, ") in ", o.data,
                  ", got ", label);
      }
    }
  }
  const data::Dataset train = data::scatter_dataset(train_all, *comm, true, o.seed, true);
  const data::Dataset test = data::scatter_dataset(test_all, *comm, true, o.seed + 1, false);
  train_all = test_all = data::Dataset();

  Generator init(o.seed);
  nn::MLP model(o.units, train.sample_numel(), kClasses, init);
  model.to(device);
  auto optimizer = parallel::create_multi_node_optimizer(
      std::make_unique<optim::Adam>(), comm,
      o.sync_timing ? profile::TimingMode::kSynchronized : profile::TimingMode::kNonIntrusive);
  optimizer->setup(model);

  data::BatchIterator batches(train, o.batchsize, true, o.seed + 1000 + static_cast<std::uint64_t>(comm->rank()));
  std::unique_ptr<train::LogReport> log;
  std::unique_ptr<train::PrintReport> report;
  std::unique_ptr<train::ProgressBar> progress;
  if (root) {
    log = std::make_unique<train::LogReport>(o.out);
    report = std::make_unique<train::PrintReport>(std::cout);
    progress = std::make_unique<train::ProgressBar>(o.epochs, train::LengthUnit::kEpoch, std::cout);
  }

  EpochSums sums;
  double train_seconds = 0.0;
  std::int64_t train_iterations = 0;
  while (batches.epoch() < o.epochs) {
    const double t0 = profile::now_seconds();
    const data::Batch batch = batches.next();
    const Tensor x = batch.x.to(device), y = batch.y.to(device);
    Tensor acc;
    const Variable loss = optimizer->update([&] {
      const Variable logits = model(Variable(x));
      acc = accuracy(logits, y);
      return softmax_cross_entropy(logits, y);
    });
    sums.add(loss.data(), acc);
    if (o.gpu) cuda::synchronize(device.index);  // the iteration's time includes its GPU work
    train_seconds += profile::now_seconds() - t0;
    ++train_iterations;
    if (progress) progress->update(batches.iteration(), batches.epoch_detail());

    if (batches.is_new_epoch()) {
      const auto [mean_loss, mean_acc] = sums.take_means();
      const train::EvalResult val = train::evaluate(model, test, o.batchsize, comm.get());
      if (root) {
        log->observe("main/loss", mean_loss);
        log->observe("main/accuracy", mean_acc);
        const train::LogEntry& entry = log->end_epoch(
            batches.epoch(), batches.iteration(),
            {{"validation/main/loss", val.loss}, {"validation/main/accuracy", val.accuracy}});
        report->print(entry);
      }
    }
  }
  if (progress) progress->close();

  const profile::Summary summary = optimizer->summary();
  if (o.trace) {
    std::filesystem::create_directories(o.out);
    optimizer->timer().write_chrome_trace(o.out + "/trace_rank" + std::to_string(comm->rank()) + ".json",
                                          comm->rank());
  }
  if (root) {
    std::cout << "\nPhase summary (" << (o.sync_timing ? "synchronized" : "non-intrusive") << " timing, "
              << o.communicator << " communicator, " << comm->size() << " processes)\n"
              << profile::format_table(summary);
    std::cout << "training: " << train_iterations << " iterations in " << train_seconds << " s, "
              << static_cast<double>(train_iterations) / train_seconds << " iters/s per process, "
              << num_threads() << " threads per process\n";
    if (o.gpu) {
      std::cout << "peak device memory (rank 0): "
                << static_cast<double>(cuda::memory_stats(device.index).peak) / 1e6 << " MB\n";
    }
    std::filesystem::create_directories(o.out);
    std::ofstream(o.out + "/phase_summary.json") << profile::to_json(summary) << "\n";
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Data-parallel MNIST MLP training with dpl (ChainerMN's example)"};
  app.add_option("-b,--batchsize", o.batchsize, "Number of images in each mini-batch (per process)")
      ->check(CLI::PositiveNumber);
  app.add_option("-e,--epoch", o.epochs, "Number of sweeps over the data set to train")->check(CLI::PositiveNumber);
  app.add_option("-u,--unit", o.units, "Number of units in each hidden layer")->check(CLI::PositiveNumber);
  app.add_flag("-g,--gpu", o.gpu, "Train on GPUs (one per process, chosen by the rank within the node)");
  app.add_option("-o,--out", o.out, "Directory to output the result");
  app.add_option("--communicator", o.communicator, "Type of communicator");
  app.add_option("--data", o.data, "Folder of the MNIST-format files (Fashion-MNIST by default)");
  app.add_option("--seed", o.seed, "Seed for initialisation and shuffling");
  app.add_flag("--sync-timing", o.sync_timing, "Barriers between phases for clean phase times");
  app.add_flag("--trace", o.trace, "Write a Chrome trace of the phases per rank into the output folder");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    comm::abort_all(e.what());
  }
}
