#include "dpl/parallel/gradient_reducer.hpp"

#include <sstream>

#include "dpl/comm/agreement.hpp"

namespace dpl::parallel {

namespace {

// One line per parameter, then one per buffer: what every rank's model must agree on before
// arenas and buffers are exchanged element by element (the arena layout follows from the names,
// shapes, memory formats and order: a slot holds its parameter in the parameter's format).
std::string model_description(const nn::Module& model) {
  std::ostringstream os;
  for (const auto& [name, var] : model.named_parameters())
    os << name << ' ' << shape_str(var.shape()) << ' ' << var.dtype()
       << (var.data().is_channels_last() && !var.data().is_contiguous() ? " channels-last" : "") << '\n';
  for (const auto& [name, var] : model.named_buffers())
    os << "buffer " << name << ' ' << shape_str(var.shape()) << ' ' << var.dtype() << '\n';
  return os.str();
}

}  // namespace

GradientReducer::GradientReducer(nn::Module& model, comm::Communicator& comm) : model_(model), comm_(comm) {}

void GradientReducer::broadcast_parameters() {
  comm::check_ranks_agree(comm_, model_description(model_),
                          {"GradientReducer.broadcast_parameters", "the models", "parameter",
                           "every rank must build the same parameters and buffers (names, shapes, dtypes, memory formats)"});
  nn::ParameterArena& arena = model_.arena();
  if (arena.numel() > 0) {
    Tensor params = arena.params();
    comm_.broadcast(params, 0);
  }
  // Buffers (running statistics and the like) are state too: every rank starts from rank 0's.
  // They are few and this runs once per arena, so one broadcast each is cheap enough; contiguous
  // tensors are what collectives take, so a strided buffer goes through a copy.
  for (auto& [name, var] : model_.named_buffers()) {
    Tensor data = var.data();
    if (data.numel() == 0) continue;
    if (data.is_contiguous()) {
      comm_.broadcast(data, 0);
    } else {
      Tensor packed = data.contiguous();
      comm_.broadcast(packed, 0);
      data.copy_(packed);
    }
  }
  broadcast_arena_ = arena.id();
}

void GradientReducer::allreduce_gradients() {
  nn::ParameterArena& arena = model_.arena();
  DPL_CHECK(arena.dtype() == kFloat32, "GradientReducer.allreduce_gradients: expected a float32 gradient arena, got ",
            arena.dtype(), "; a model cast to 16 bits is reduced through the float32 master gradients of its ",
            "optim::MixedPrecision optimizer (MultiNodeOptimizer does this)");
  allreduce_gradients({arena.grads()});
}

void GradientReducer::allreduce_gradients(const std::vector<Tensor>& buffers) {
  const char* who = "GradientReducer.allreduce_gradients";
  DPL_CHECK(!buffers.empty(), who, ": expected at least the gradient buffer, got none");
  nn::ParameterArena& arena = model_.arena();
  DPL_CHECK(buffers.front().defined() && buffers.front().numel() == arena.numel(), who,
            ": expected a gradient buffer of the arena's ", arena.numel(), " elements, got ",
            buffers.front().defined() ? buffers.front().numel() : 0);
  for (const Tensor& b : buffers)
    DPL_CHECK(b.defined() && b.dtype() == kFloat32 && b.device() == arena.device(), who,
              ": expected float32 buffers on ", arena.device(), ", got ",
              b.defined() ? detail::concat(b.dtype(), " on ", b.device()) : std::string("an undefined one"));
  // The mean over one rank is the gradient itself: no copy, no pass over the arena.
  communicated_ = arena.numel() > 0 && comm_.size() > 1;
  if (!communicated_) return;
  for (std::size_t i = 1; i < buffers.size(); ++i) {
    Tensor small = buffers[i];
    comm_.allreduce(small, comm::ReduceOp::kMean);
  }
  Tensor grads = buffers.front();
  comm_.allreduce(grads, comm::ReduceOp::kMean, comm_.options().allreduce_dtype);
}

bool GradientReducer::needs_broadcast() { return model_.arena().id() != broadcast_arena_; }

const std::vector<comm::SubPhase>& GradientReducer::last_phases() const {
  static const auto* none = new std::vector<comm::SubPhase>();  // never destroyed: outlives every reducer
  return communicated_ ? comm_.last_phases() : *none;
}

void broadcast_parameters(nn::Module& model, comm::Communicator& comm) {
  GradientReducer(model, comm).broadcast_parameters();
}

void allreduce_gradients(nn::Module& model, comm::Communicator& comm) {
  GradientReducer(model, comm).allreduce_gradients();
}

}  // namespace dpl::parallel
