#include "dpl/train/evaluator.hpp"

#include <cmath>
#include <vector>

#include "dpl/autograd/ops.hpp"
#include "dpl/core/error.hpp"
#include "dpl/data/batch_iterator.hpp"

namespace dpl::train {

namespace {
// Puts the model into eval mode and back into its previous mode on every way out.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(nn::Module& m) : model_(m), was_training_(m.is_training()) { model_.eval(); }
  ~EvalModeGuard() { model_.train(was_training_); }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  nn::Module& model_;
  bool was_training_;
};

// The sums of one rank: loss * samples, correct predictions, samples.
struct Sums {
  double loss = 0.0;
  std::int64_t correct = 0;
  std::int64_t count = 0;
};

Sums local_sums(nn::Module& model, data::BatchSource* source, std::int64_t batches) {
  Sums s;
  EvalModeGuard mode(model);
  NoGradGuard no_grad;
  const Device device = model.device();
  for (std::int64_t i = 0; i < batches; ++i) {
    const data::Batch batch = source->next();
    const Tensor x = batch.x.to(device);
    const Tensor y = batch.y.to(device);
    const Variable logits = model.forward(Variable(x));
    const std::int64_t b = batch.size();
    // The ops return batch means; scaling back by b gives sums that weight every sample once.
    s.loss += static_cast<double>(softmax_cross_entropy(logits, y).item()) * static_cast<double>(b);
    s.correct += std::llround(static_cast<double>(accuracy(logits, y).item()) * static_cast<double>(b));
    s.count += b;
  }
  return s;
}

EvalResult combine(Sums s, comm::Communicator* comm) {
  double& loss_sum = s.loss;
  std::int64_t& correct = s.correct;
  std::int64_t& count = s.count;
  if (comm != nullptr && comm->size() > 1) {
    // Exact float64 values rather than an allreduce in float32: the sums stay exact to double
    // precision, and adding them in rank order gives every rank the identical result.
    const std::vector<double> all = comm::allgather_doubles(
        *comm, {loss_sum, static_cast<double>(correct), static_cast<double>(count)});
    loss_sum = 0.0;
    correct = 0;
    count = 0;
    for (int r = 0; r < comm->size(); ++r) {
      loss_sum += all[3 * r];
      correct += static_cast<std::int64_t>(all[3 * r + 1]);
      count += static_cast<std::int64_t>(all[3 * r + 2]);
    }
  }
  DPL_CHECK(count > 0, "evaluate: no samples to evaluate: the data set is empty",
            comm != nullptr && comm->size() > 1 ? " on every rank" : "");
  EvalResult r;
  r.loss = loss_sum / static_cast<double>(count);
  r.accuracy = static_cast<double>(correct) / static_cast<double>(count);
  r.samples = count;
  return r;
}

}  // namespace

EvalResult evaluate(nn::Module& model, const data::Dataset& dataset, std::int64_t batch_size,
                    comm::Communicator* comm) {
  DPL_CHECK(batch_size >= 1, "evaluate: expected batch_size >= 1, got ", batch_size);
  Sums s;
  if (!dataset.empty()) {
    data::BatchIterator it(dataset, batch_size, /*shuffle=*/false, /*seed=*/0, /*repeat=*/false);
    s = local_sums(model, &it, it.batches_per_epoch());
  }
  return combine(s, comm);
}

EvalResult evaluate(nn::Module& model, data::BatchSource& source, std::int64_t batches, comm::Communicator* comm) {
  DPL_CHECK(batches >= 0, "evaluate: expected batches >= 0, got ", batches);
  return combine(local_sums(model, &source, batches), comm);
}

}  // namespace dpl::train
