// reshape and flatten: new shapes of the same row-major data.
#include "autograd/ops/support.hpp"

namespace dpl {

using namespace ops_detail;

namespace {

class ReshapeNode final : public Node {
 public:
  Shape in_shape;
  const char* name() const override { return "reshape"; }
  void backward(const Tensor& gy, std::vector<GradTarget>& t) override {
    if (!t[0].needed()) return;
    const Tensor g = dense(gy).reshape(in_shape);
    write_in(t[0], MemoryFormat::kContiguous, [&](float beta, Tensor& gx) { backend::axpby(1.f, g, beta, gx); });
  }
};

void check_defined(const char* op, const Variable& x) {
  DPL_CHECK(x.defined(), op, ": expected an input, got an undefined Variable");
}

}  // namespace

Variable reshape(const Variable& x, const Shape& shape) {
  check_defined("reshape", x);
  Tensor out = dense(x.data()).reshape(shape);
  if (!any_requires_grad({&x})) return Variable(out);
  auto node = std::make_shared<ReshapeNode>();
  node->in_shape = x.shape();
  node->set_inputs({x});
  return Variable::make_result(out, node);
}

Variable flatten(const Variable& x, std::int64_t start_dim) {
  check_defined("flatten", x);
  return reshape(x, dense(x.data()).flatten(start_dim).shape());
}

}  // namespace dpl
