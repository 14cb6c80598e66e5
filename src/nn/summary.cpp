#include "dpl/nn/summary.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <typeinfo>
#include <vector>

#include "dpl/nn/any_module.hpp"
#include "dpl/nn/layers.hpp"

namespace dpl::nn {

namespace {

// The dynamic type's name without the library's namespace ("Linear", not "dpl::nn::Linear").
std::string short_type_name(const Module& m) {
  std::string name = type_name(typeid(m));
  const std::string prefix = "dpl::nn::";
  if (name.compare(0, prefix.size(), prefix) == 0) name.erase(0, prefix.size());
  return name;
}

struct Row {
  std::string name, type, shape;
  std::int64_t params;
};

// Restores the model's training flag however the summary's forward ends.
class EvalScope {
 public:
  explicit EvalScope(Module& m) : m_(m), was_training_(m.is_training()) { m_.eval(); }
  ~EvalScope() { m_.train(was_training_); }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  Module& m_;
  bool was_training_;
};

}  // namespace

std::string summary(Module& model, const Shape& input_shape, DType dtype) {
  std::vector<Row> rows;
  {
    NoGradGuard no_grad;
    EvalScope eval(model);
    Variable h(Tensor::zeros(input_shape, TensorOptions(dtype, model.device())));
    if (auto* seq = dynamic_cast<Sequential*>(&model)) {
      for (std::size_t i = 0; i < seq->size(); ++i) {
        const auto& [name, child] = seq->children()[i];
        h = (*seq)[i].forward(h);
        rows.push_back({name, short_type_name(*child), shape_str(h.shape()), child->num_parameters()});
      }
    } else {
      for (const auto& [name, child] : model.children())
        rows.push_back({name, short_type_name(*child), "-", child->num_parameters()});
      h = model.forward(h);
      rows.push_back({"(output)", short_type_name(model), shape_str(h.shape()), 0});
    }
  }
  std::size_t wn = 4, wt = 4, ws = 12;
  for (const Row& r : rows) {
    wn = std::max(wn, r.name.size());
    wt = std::max(wt, r.type.size());
    ws = std::max(ws, r.shape.size());
  }
  std::int64_t trainable = 0;
  for (const auto& p : model.named_parameters())
    if (p.second.requires_grad()) trainable += p.second.numel();

  std::ostringstream out;
  auto cell = [&](const std::string& s, std::size_t w) { out << s << std::string(w - s.size() + 2, ' '); };
  cell("Name", wn);
  cell("Type", wt);
  cell("Output shape", ws);
  out << "Params\n" << std::string(wn + wt + ws + 6 + 6, '-') << '\n';
  for (const Row& r : rows) {
    cell(r.name, wn);
    cell(r.type, wt);
    cell(r.shape, ws);
    out << r.params << '\n';
  }
  out << "Input shape: " << shape_str(input_shape) << '\n';
  out << "Total params: " << model.num_parameters() << '\n';
  out << "Trainable params: " << trainable << '\n';
  return out.str();
}

}  // namespace dpl::nn
