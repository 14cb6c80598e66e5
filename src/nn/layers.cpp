#include "dpl/nn/layers.hpp"

#include <cmath>
#include <string>

#include "dpl/autograd/ops.hpp"

namespace dpl::nn {

Linear::Linear(const LinearOptions& options, Generator& gen) : options_(options) {
  const std::int64_t in = options.in_features(), out = options.out_features();
  DPL_CHECK(in > 0 && out > 0, "Linear: expected positive feature counts, got in=", in, " out=", out);
  const float stddev = std::sqrt(1.f / static_cast<float>(in));
  weight_ = register_parameter("weight", Tensor::normal({out, in}, 0.f, stddev, gen));
  if (options.bias()) bias_ = register_parameter("bias", Tensor::zeros({out}));
}

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias, Generator& gen)
    : Linear(LinearOptions(in_features, out_features).bias(bias), gen) {}

Variable Linear::forward(const Variable& x) { return linear(x, weight_, bias_); }

Variable ReLU::forward(const Variable& x) { return relu(x); }

Variable Flatten::forward(const Variable& x) { return flatten(x, 1); }

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) append(m);
}

Sequential& Sequential::append(AnyModule module) {
  DPL_CHECK(!module.is_empty(), "Sequential: expected a module to append, got an empty AnyModule");
  register_module(std::to_string(modules_.size()), module.ptr());
  modules_.push_back(std::move(module));
  return *this;
}

Variable Sequential::forward(const Variable& x) {
  Variable h = x;
  for (AnyModule& m : modules_) h = m.forward(h);
  return h;
}

Variable Sequential::forward_checkpointed(std::int64_t segments, const Variable& x) {
  const auto n = static_cast<std::int64_t>(modules_.size());
  DPL_CHECK(segments >= 1 && segments <= n, "Sequential::forward_checkpointed: expected 1 <= segments <= ", n,
            " (the number of modules), got ", segments);
  Variable h = x;
  std::int64_t begin = 0;
  for (std::int64_t s = 0; s < segments; ++s) {
    const std::int64_t end = begin + n / segments + (s < n % segments ? 1 : 0);
    const auto run = [this, begin, end](const Variable& in) {
      Variable y = in;
      for (std::int64_t i = begin; i < end; ++i) y = modules_[static_cast<std::size_t>(i)].forward(y);
      return y;
    };
    // The last run's activations are what backward needs first: kept, not recomputed.
    h = s + 1 < segments ? checkpoint(run, h) : run(h);
    begin = end;
  }
  return h;
}

const AnyModule& Sequential::operator[](std::size_t i) const {
  DPL_CHECK(i < modules_.size(), "Sequential: index ", i, " is out of range for ", modules_.size(), " modules");
  return modules_[i];
}

MLP::MLP(std::int64_t units, std::int64_t in_features, std::int64_t out_features, Generator& gen) {
  l1_ = register_module("l1", std::make_shared<Linear>(in_features, units, true, gen));
  l2_ = register_module("l2", std::make_shared<Linear>(units, units, true, gen));
  l3_ = register_module("l3", std::make_shared<Linear>(units, out_features, true, gen));
}

Variable MLP::forward(const Variable& x) {
  const Variable in = x.data().dim() == 2 ? x : flatten(x, 1);
  return l3_->forward(relu(l2_->forward(relu(l1_->forward(in)))));
}

}  // namespace dpl::nn
