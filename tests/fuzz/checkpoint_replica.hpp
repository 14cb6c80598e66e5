#pragma once
// The training state that the checkpoint seeds are saved from (make_seeds.cpp) and that the
// checkpoint harness loads them into: both must build the very same one.

#include <cstdint>

#include "dpl/autograd/ops.hpp"
#include "dpl/data/batch_iterator.hpp"
#include "dpl/nn/layers.hpp"
#include "dpl/optim/optimizer.hpp"
#include "dpl/train/checkpoint.hpp"
#include "dpl/train/training_log.hpp"
#include "fuzz_util.hpp"

namespace dpl::fuzz {

// A 3-2-2 MLP, Adam, an iterator over 4 samples in batches of 2, one generator and a log.
struct Replica {
  Generator init{1};
  nn::MLP model{2, 3, 2, init};
  optim::Adam opt{0.01f};
  data::BatchIterator it;
  Generator noise{11};
  train::TrainingLog log{""};

  static data::Dataset problem() {
    Tensor x = Tensor::from_vector<float>({0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f, 9.f, 10.f, 11.f}, {4, 3});
    Tensor y = Tensor::from_vector<std::int32_t>({0, 1, 1, 0}, {4});
    return data::Dataset(x, y);
  }
  Replica() : it(problem(), 2, true, 3) { opt.setup(model); }

  train::TrainingState state() { return {&model, &opt, &it, {{"noise", &noise}}, &log, {}}; }

  // One training step as a Trainer takes it. A restored state must still take one: the iterator
  // serves a batch, the optimizer updates, the log records.
  void step() {
    const data::Batch b = it.next();
    require(b.x.dim() == 2 && b.x.shape()[0] == 2, "a restored iterator served a batch of the wrong shape");
    const Variable loss = opt.update([&] { return softmax_cross_entropy(model(Variable(b.x)), b.y); });
    noise.next_u64();
    log.observe("main/loss", loss.item());
    if (it.is_new_epoch()) log.end_epoch(it.epoch(), it.iteration());
  }
};

}  // namespace dpl::fuzz
