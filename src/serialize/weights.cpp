#include "dpl/serialize/weights.hpp"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <vector>

#include "dpl/core/error.hpp"
#include "dpl/serialize/safetensors.hpp"

namespace dpl::serialize {

using nn::Module;

namespace {
// Parameters, then buffers: the names save_weights writes and load_weights expects.
std::vector<std::pair<std::string, Variable>> weights_of(const Module& model) {
  auto all = model.named_parameters();
  for (auto& entry : model.named_buffers()) all.push_back(std::move(entry));
  return all;
}

// A model with thousands of tensors against the wrong file would otherwise give a page of text.
constexpr std::size_t kMaxListed = 10;
}  // namespace

void save_weights(const Module& model, const std::string& path) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, var] : weights_of(model)) tensors.emplace_back(name, var.data());
  serialize::save_safetensors(path, tensors);
}

std::string weights_mismatch(const Module& model, const std::vector<std::pair<std::string, Tensor>>& tensors,
                             bool strict) {
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [name, t] : tensors) given.emplace(name, &t);

  // A checkpoint holds the model under "model/": say so rather than list every tensor as missing.
  const auto all = weights_of(model);
  const bool checkpoint = !all.empty() && std::all_of(all.begin(), all.end(), [&](const auto& entry) {
    return given.count(entry.first) == 0 && given.count("model/" + entry.first) == 1;
  });
  if (checkpoint)
    return "it is a training checkpoint, whose model tensors are named 'model/<name>': load the model from it "
           "with train::load_model_from_checkpoint, or write its weights to a file of their own with the "
           "extract_weights tool";

  std::vector<std::string> problems;
  std::set<std::string> wanted;
  for (const auto& [name, var] : all) {
    wanted.insert(name);
    const auto it = given.find(name);
    const Tensor& dst = var.data();
    if (it == given.end()) {
      problems.push_back(detail::concat("'", name, "' is missing from the file"));
    } else if (it->second->dtype() != dst.dtype()) {
      problems.push_back(detail::concat("'", name, "' is ", it->second->dtype(), " in the file but ", dst.dtype(),
                                        " in the model"));
    } else if (it->second->shape() != dst.shape()) {
      problems.push_back(detail::concat("'", name, "' has shape ", shape_str(it->second->shape()),
                                        " in the file but ", shape_str(dst.shape()), " in the model"));
    }
  }
  if (strict)
    for (const auto& [name, t] : tensors)
      if (wanted.count(name) == 0)
        problems.push_back(detail::concat("'", name, "' is in the file but not in the model (strict loading)"));

  std::string list;
  for (std::size_t i = 0; i < problems.size() && i < kMaxListed; ++i) list += (i ? "; " : "") + problems[i];
  if (problems.size() > kMaxListed) list += detail::concat("; and ", problems.size() - kMaxListed, " more");
  return list;
}

void load_weights(Module& model, const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const std::string& source, bool strict) {
  const std::string mismatch = weights_mismatch(model, tensors, strict);
  if (!mismatch.empty()) DPL_FAIL("load_weights: ", source, " does not fit the model, which is unchanged: ", mismatch);
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [name, t] : tensors) given.emplace(name, &t);
  for (const auto& [name, var] : weights_of(model)) {
    Tensor dst = var.data();
    dst.copy_(*given.at(name));
  }
}

void load_weights(Module& model, const std::string& path, bool strict) {
  load_weights(model, serialize::load_safetensors(path).tensors, path, strict);
}

}  // namespace dpl::serialize
