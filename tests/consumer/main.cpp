// Trains a tiny linear model against the installed dpl and exits 0 only if it learned.
#include <cstdio>

#include "dpl/dpl.hpp"

int main() {
  using namespace dpl;
  Generator gen(7);
  // y = 1 when x0 > x1: a linearly separable problem.
  const std::int64_t n = 64;
  Tensor x = Tensor::uniform({n, 2}, -1.f, 1.f, gen);
  Tensor y = Tensor::empty({n}, kInt32);
  for (std::int64_t i = 0; i < n; ++i) y.set<std::int32_t>({i}, x.at<float>({i, 0}) > x.at<float>({i, 1}) ? 1 : 0);
  nn::Linear model(2, 2, true, gen);
  optim::SGD opt(0.5f);
  opt.setup(model);
  float loss = 0.f;
  for (int step = 0; step < 200; ++step)
    loss = opt.update([&] { return softmax_cross_entropy(model(Variable(x)), y); }).item();
  const float acc = accuracy(model(Variable(x)), y).item();
  // The data-parallel entry points link from the installed package (called here they would
  // start MPI, which a one-process consumer does not need).
  void (*reduce)(nn::Module&, comm::Communicator&) = &parallel::allreduce_gradients;
  if (reduce == nullptr) return 1;
  std::printf("dpl %s consumer: loss %.4f accuracy %.3f\n", DPL_VERSION_STRING, loss, acc);
  return acc >= 0.95f ? 0 : 1;
}
