#include "dpl/nn/activations.hpp"

#include "dpl/autograd/ops.hpp"

namespace dpl::nn {

Variable LeakyReLU::forward(const Variable& x) { return leaky_relu(x, slope_); }
Variable Sigmoid::forward(const Variable& x) { return sigmoid(x); }
Variable Tanh::forward(const Variable& x) { return tanh(x); }
Variable GELU::forward(const Variable& x) { return gelu(x, approximate_); }

Dropout::Dropout(const DropoutOptions& options, Generator& gen) : options_(options), gen_(&gen) {
  const float p = options.p();
  DPL_CHECK(p >= 0.f && p < 1.f, "Dropout: expected a drop probability p in [0, 1), got ", p);
}

Dropout::Dropout(float p, Generator& gen) : Dropout(DropoutOptions(p), gen) {}

Variable Dropout::forward(const Variable& x) { return dropout(x, options_.p(), *gen_, is_training()); }

Dropout2d::Dropout2d(const DropoutOptions& options, Generator& gen) : options_(options), gen_(&gen) {
  const float p = options.p();
  DPL_CHECK(p >= 0.f && p < 1.f, "Dropout2d: expected a drop probability p in [0, 1), got ", p);
}

Variable Dropout2d::forward(const Variable& x) { return dropout2d(x, options_.p(), *gen_, is_training()); }

Variable Softmax::forward(const Variable& x) { return softmax(x); }
Variable LogSoftmax::forward(const Variable& x) { return log_softmax(x); }

}  // namespace dpl::nn
