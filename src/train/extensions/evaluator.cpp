#include "dpl/train/extensions/evaluator.hpp"

#include <cmath>
#include <utility>

#include "dpl/core/error.hpp"
#include "dpl/nn/module.hpp"
#include "dpl/train/evaluator.hpp"
#include "dpl/train/trainer.hpp"

namespace dpl::train::extensions {

Evaluator::Evaluator(data::Dataset dataset, std::int64_t batch_size, std::string prefix)
    : dataset_(std::move(dataset)), batch_size_(batch_size), prefix_(std::move(prefix)) {
  DPL_CHECK(batch_size >= 1, "Evaluator: expected a batch size >= 1, got ", batch_size);
}

Evaluator::Evaluator(std::shared_ptr<data::BatchSource> source, std::int64_t batches, std::string prefix)
    : source_(std::move(source)), batches_(batches), prefix_(std::move(prefix)) {
  DPL_CHECK(source_ != nullptr, "Evaluator: expected a batch source, got null");
  DPL_CHECK(batches >= 1, "Evaluator: expected >= 1 batches per evaluation, got ", batches);
}

void Evaluator::operator()(Trainer& trainer) {
  nn::Module& model = trainer.updater().optimizer().target();
  const EvalResult r = source_ ? evaluate(model, *source_, batches_, trainer.communicator().get())
                               : evaluate(model, dataset_, batch_size_, trainer.communicator().get());
  // The value is the same on every rank, so every rank stops alike. A run that opted out of
  // non-finite checks (NonFinitePolicy::kOff) is let through.
  DPL_CHECK(std::isfinite(r.loss) ||
                trainer.updater().optimizer().non_finite_policy() == optim::NonFinitePolicy::kOff,
            "Evaluator: ", prefix_, "loss is ", r.loss, " over ", r.samples, " samples at iteration ",
            trainer.updater().iterator().iteration(), ": the model's outputs are not finite (a run that "
            "skips non-finite steps keeps finite weights: look at the data and at 16-bit overflow); "
            "NonFinitePolicy::kOff lets it through");
  trainer.observation().observe(prefix_ + "loss", r.loss);
  trainer.observation().observe(prefix_ + "accuracy", r.accuracy);
}

}  // namespace dpl::train::extensions
