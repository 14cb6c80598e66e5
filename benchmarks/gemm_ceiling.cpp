// The matrix-product ceiling of a training step: times, through dpl's own matmul, the products
// one MNIST-MLP step (784-1000-1000-10, batch 100) must compute, and a large square product, on
// the chosen device. Prints key=value records:
//   impl=dpl what=gemm_step device=cpu gflop=... ms=... gflops=... max_iters_per_s=...
//   impl=dpl what=gemm_square device=cpu n=2048 gflops=...
// max_iters_per_s is the step rate if a step did nothing but these products: the ceiling against
// which the training loop's iters/s is judged.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dpl/dpl.hpp"

namespace {
using namespace dpl;

void sync(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

// Median seconds of `reps` timings of `inner` calls of f.
template <typename F>
double median_seconds(Device d, int reps, int inner, F&& f) {
  for (int i = 0; i < 3; ++i) f();
  sync(d);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) f();
    sync(d);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / inner);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"matrix-product ceiling of the MNIST-MLP training step"};
  std::string device_name = "cpu";
  std::int64_t batch = 100, units = 1000, square = 2048;
  int threads = 0, reps = 9;
  app.add_option("--device", device_name, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("-b,--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--units", units, "hidden units")->check(CLI::PositiveNumber);
  app.add_option("--square", square, "extent of the square product")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "host threads (default: dpl's default)")->check(CLI::NonNegativeNumber);
  app.add_option("--reps", reps, "timed repetitions; the median is reported")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) set_num_threads(threads);
  const Device dev = device_name == "cuda" ? Device::cuda(0) : Device::cpu();

  Generator gen(1);
  auto rnd = [&](std::int64_t r, std::int64_t c) { return Variable(Tensor::uniform({r, c}, -1.f, 1.f, gen, dev)); };
  const std::int64_t in = 784, out = 10;
  // The products of one step (the input needs no gradient, so its gradient is never formed):
  // forward x W1^T, h1 W2^T, h2 W3^T; backward gW = gy^T x per layer, gx = gy W for layers 2, 3.
  // Operands are laid out so each is a plain product of the same shape and work.
  struct Product {
    Variable a, b;
  };
  std::vector<Product> step = {
      {rnd(batch, in), rnd(in, units)},     {rnd(batch, units), rnd(units, units)},
      {rnd(batch, units), rnd(units, out)}, {rnd(units, batch), rnd(batch, in)},
      {rnd(units, batch), rnd(batch, units)}, {rnd(out, batch), rnd(batch, units)},
      {rnd(batch, units), rnd(units, units)}, {rnd(batch, out), rnd(out, units)},
  };
  double flop = 0;
  for (const auto& p : step) flop += 2.0 * p.a.shape()[0] * p.a.shape()[1] * p.b.shape()[1];

  NoGradGuard no_grad;
  const double s_step = median_seconds(dev, reps, 20, [&] {
    for (const auto& p : step) matmul(p.a, p.b);
  });
  const Variable big_a = rnd(square, square), big_b = rnd(square, square);
  const double s_square = median_seconds(dev, reps, 2, [&] { matmul(big_a, big_b); });

  std::printf("impl=dpl what=gemm_step device=%s threads=%d bs=%lld units=%lld gflop=%.4f ms=%.3f gflops=%.1f "
              "max_iters_per_s=%.1f\n",
              device_name.c_str(), num_threads(), static_cast<long long>(batch), static_cast<long long>(units),
              flop / 1e9, s_step * 1e3, flop / s_step / 1e9, 1.0 / s_step);
  std::printf("impl=dpl what=gemm_square device=%s threads=%d n=%lld gflops=%.1f\n", device_name.c_str(),
              num_threads(), static_cast<long long>(square),
              2.0 * square * square * square / s_square / 1e9);
  return 0;
}
