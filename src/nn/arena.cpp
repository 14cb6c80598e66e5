#include "dpl/nn/arena.hpp"

#include <atomic>

namespace dpl::nn {

namespace {

// The slot `view` (contiguous) re-strided to like's memory format: channels-last stays
// channels-last (the same elements, NHWC order), anything else is row-major.
Tensor in_format_of(const Tensor& like, const Tensor& view) {
  if (like.memory_format() != MemoryFormat::kChannelsLast) return view;
  const Shape& s = view.shape();
  return Tensor(view.storage(), view.offset(), s, {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]}, view.dtype());
}

}  // namespace

ParameterArena ParameterArena::pack(const std::vector<std::pair<std::string, Variable>>& named) {
  static std::atomic<std::uint64_t> next_id{1};
  ParameterArena a;
  a.id_ = next_id++;
  Device device = Device::cpu();
  DType dtype = DType::kFloat32;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < named.size(); ++i) {
    const auto& [name, var] = named[i];
    DPL_CHECK(var.defined(), "ParameterArena::pack: parameter '", name, "' is undefined");
    if (i == 0) {
      device = var.device();
      dtype = var.dtype();
    }
    DPL_CHECK(is_float_dtype(dtype), "ParameterArena::pack: expected parameters of dtype float32, bfloat16 or ",
              "float16, got parameter '", name, "' of dtype ", var.dtype());
    // One dtype per arena, so that an update or a cast is one pass over one buffer.
    DPL_CHECK(var.dtype() == dtype, "ParameterArena::pack: expected every parameter of dtype ", dtype,
              " (the first parameter's), got parameter '", name, "' of dtype ", var.dtype());
    DPL_CHECK(var.device() == device, "ParameterArena::pack: expected every parameter on ", device,
              ", got parameter '", name, "' on ", var.device());
    ArenaEntry e{name, var.shape(), total, var.numel()};
    total += (e.numel + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    a.entries_.push_back(std::move(e));
  }
  a.params_ = Tensor::zeros({total}, TensorOptions(dtype, device));
  a.grads_ = Tensor::zeros({total}, TensorOptions(dtype, device));
  for (std::size_t i = 0; i < named.size(); ++i) {
    const ArenaEntry& e = a.entries_[i];
    Variable var = named[i].second;
    Tensor p = in_format_of(var.data(), a.params_.view_range(e.offset, e.shape));
    p.copy_(var.data());
    // Gradients already accumulated survive a repack (e.g. a parameter added mid-training).
    const Tensor old_grad = var.grad();
    Tensor g = in_format_of(var.data(), a.grads_.view_range(e.offset, e.shape));
    if (old_grad.defined() && old_grad.shape() == e.shape) g.copy_(old_grad);
    var.set_data(p);
    var.set_grad(g);
  }
  return a;
}

void ParameterArena::zero_grads() {
  if (grads_.defined()) grads_.fill_(0.0);
}

bool ParameterArena::binds(const std::vector<std::pair<std::string, Variable>>& named) const {
  if (!params_.defined() || named.size() != entries_.size()) return false;
  for (std::size_t i = 0; i < named.size(); ++i) {
    const ArenaEntry& e = entries_[i];
    const Variable& v = named[i].second;
    if (named[i].first != e.name || !v.defined() || v.shape() != e.shape) return false;
    const Tensor& d = v.data();
    if (!d.shares_storage_with(params_) || d.offset() != params_.offset() + e.offset ||
        !(d.is_contiguous() || d.is_channels_last()))
      return false;
    const Tensor& g = v.grad();
    if (!g.shares_storage_with(grads_) || g.offset() != grads_.offset() + e.offset) return false;
  }
  return true;
}

}  // namespace dpl::nn
