#include "dpl/parallel/gradient_reducer.hpp"

#include <sstream>

#include "dpl/comm/agreement.hpp"

namespace dpl::parallel {

namespace {

// One line per parameter: what every rank's model must agree on before arenas are exchanged
// element by element (the arena layout follows from the names, shapes and order).
std::string model_description(const nn::Module& model) {
  std::ostringstream os;
  for (const auto& [name, var] : model.named_parameters())
    os << name << ' ' << shape_str(var.shape()) << ' ' << var.dtype() << '\n';
  return os.str();
}

}  // namespace

GradientReducer::GradientReducer(nn::Module& model, comm::Communicator& comm) : model_(model), comm_(comm) {}

void GradientReducer::broadcast_parameters() {
  comm::check_ranks_agree(comm_, model_description(model_),
                          {"GradientReducer.broadcast_parameters", "the models", "parameter",
                           "every rank must build the same parameters (names, shapes, dtypes)"});
  nn::ParameterArena& arena = model_.arena();
  if (arena.numel() > 0) {
    Tensor params = arena.params();
    comm_.broadcast(params, 0);
  }
  // Module buffers (running statistics and the like) are to be broadcast here too, from rank 0,
  // once modules list them beside their parameters.
  broadcast_arena_ = arena.id();
}

void GradientReducer::allreduce_gradients() {
  nn::ParameterArena& arena = model_.arena();
  // The mean over one rank is the gradient itself: no copy, no pass over the arena.
  communicated_ = arena.numel() > 0 && comm_.size() > 1;
  if (!communicated_) return;
  Tensor grads = arena.grads();
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
