#include "dpl/nn/layers.hpp"

#include <cmath>
#include <string>

#include "dpl/autograd/ops.hpp"

namespace dpl::nn {

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias, Generator& gen)
    : in_(in_features), out_(out_features) {
  DPL_CHECK(in_features > 0 && out_features > 0, "Linear: expected positive feature counts, got in=", in_features,
            " out=", out_features);
  const float stddev = std::sqrt(1.f / static_cast<float>(in_features));
  weight_ = register_parameter("weight", Tensor::normal({out_features, in_features}, 0.f, stddev, gen));
  if (bias) bias_ = register_parameter("bias", Tensor::zeros({out_features}));
}

Variable Linear::forward(const Variable& x) { return linear(x, weight_, bias_); }

Variable ReLU::forward(const Variable& x) { return relu(x); }

Variable Flatten::forward(const Variable& x) { return flatten(x, 1); }

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) append(m);
}

Sequential& Sequential::append(std::shared_ptr<Module> module) {
  register_module(std::to_string(children().size()), std::move(module));
  return *this;
}

Variable Sequential::forward(const Variable& x) {
  Variable h = x;
  for (const auto& c : children()) h = c.second->forward(h);
  return h;
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
