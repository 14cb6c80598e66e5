#include "dpl/parallel/multi_node_optimizer.hpp"

#include <sstream>

#include "backend/kernels.hpp"
#include "dpl/nn/module.hpp"

namespace dpl::parallel {

namespace {
// One line per parameter: the description every rank must agree on.
std::string model_signature(const nn::Module& model) {
  std::ostringstream os;
  for (const auto& [name, var] : model.named_parameters())
    os << name << ' ' << shape_str(var.shape()) << ' ' << var.dtype() << '\n';
  return os.str();
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

Tensor string_to_tensor(const std::string& s) {
  std::vector<std::int32_t> v(s.begin(), s.end());
  return Tensor::from_vector<std::int32_t>(v, {static_cast<std::int64_t>(v.size())});
}
}  // namespace

MultiNodeOptimizer::MultiNodeOptimizer(std::unique_ptr<optim::Optimizer> actual,
                                       std::shared_ptr<comm::Communicator> comm, profile::TimingMode mode)
    : actual_(std::move(actual)), comm_(std::move(comm)) {
  DPL_CHECK(actual_ != nullptr, "MultiNodeOptimizer: the wrapped optimizer is null");
  DPL_CHECK(comm_ != nullptr, "MultiNodeOptimizer: the communicator is null");
  set_timing_mode(mode);
}

void MultiNodeOptimizer::set_timing_mode(profile::TimingMode mode) {
  mode_ = mode;
  comm_->set_synchronized(mode == profile::TimingMode::kSynchronized);
}

void MultiNodeOptimizer::setup(nn::Module& model) {
  target_ = &model;
  check_and_broadcast(model);
  actual_->setup(model);
}

void MultiNodeOptimizer::check_and_broadcast(nn::Module& model) {
  nn::ParameterArena& arena = model.arena();
  const std::string mine = model_signature(model);

  // 1. Everyone learns rank 0's description (its length first, then its characters).
  Tensor len = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(mine.size())}, {1});
  comm_->broadcast(len, 0);
  const std::int64_t n0 = len.to_vector<std::int64_t>()[0];
  Tensor text = comm_->rank() == 0 ? string_to_tensor(mine) : Tensor::zeros({n0}, kInt32);
  if (n0 > 0) comm_->broadcast(text, 0);
  std::string reference;
  for (std::int32_t c : text.to_vector<std::int32_t>()) reference.push_back(static_cast<char>(c));

  // 2. Everyone learns whether anyone differs, so that all ranks fail together.
  Tensor differs = Tensor::from_vector<std::int32_t>({mine == reference ? 0 : 1}, {1});
  Tensor all = Tensor::empty({comm_->size()}, kInt32);
  comm_->allgather(differs, all);
  const auto flags = all.to_vector<std::int32_t>();
  std::ostringstream bad;
  for (int r = 0; r < comm_->size(); ++r)
    if (flags[static_cast<std::size_t>(r)]) bad << (bad.tellp() > 0 ? ", " : "") << r;
  if (!bad.str().empty()) {
    std::ostringstream msg;
    msg << "MultiNodeOptimizer.setup: the models differ between ranks (rank(s) " << bad.str()
        << " differ from rank 0); every rank must build the same parameters (names, shapes, dtypes)";
    if (mine != reference) {
      const auto a = split_lines(reference), b = split_lines(mine);
      std::size_t i = 0;
      while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
      msg << ". Rank " << comm_->rank() << ": expected parameter '" << (i < a.size() ? a[i] : "(none)")
          << "' as on rank 0, got '" << (i < b.size() ? b[i] : "(none)") << "' (" << b.size()
          << " parameters here, " << a.size() << " on rank 0)";
    }
    DPL_FAIL(msg.str());
  }

  comm_->bcast_data(model);
  checked_arena_ = arena.id();
  timer_.set_allreduce_size(arena.nbytes(), comm_->size());
}

void MultiNodeOptimizer::sync_point() {
  if (mode_ != profile::TimingMode::kSynchronized) return;
  backend::kernels_for(target().device()).synchronize();
  comm_->barrier();
}

void MultiNodeOptimizer::allreduce_and_step() {
  nn::Module& model = target();
  if (model.arena().id() != checked_arena_) check_and_broadcast(model);
  sync_point();
  {
    profile::ScopedPhase phase(timer_, "allreduce", iteration_);
    comm_->allreduce_grad(model);
    if (mode_ == profile::TimingMode::kSynchronized) backend::kernels_for(model.device()).synchronize();
  }
  for (const auto& sub : comm_->last_phases())
    timer_.record("allreduce/" + sub.name, profile::now_seconds() - sub.seconds, sub.seconds, iteration_);
  sync_point();
  {
    profile::ScopedPhase phase(timer_, "optimize", iteration_);
    actual_->update();
    if (mode_ == profile::TimingMode::kSynchronized) backend::kernels_for(model.device()).synchronize();
  }
  ++iteration_;
}

void MultiNodeOptimizer::update() {
  DPL_CHECK(target_ != nullptr, "MultiNodeOptimizer: call setup(model) before update()");
  allreduce_and_step();
}

Variable MultiNodeOptimizer::update(const std::function<Variable()>& loss_fn) {
  DPL_CHECK(target_ != nullptr, "MultiNodeOptimizer: call setup(model) before update()");
  sync_point();
  Variable loss;
  {
    profile::ScopedPhase phase(timer_, "compute", iteration_);
    zero_grad();
    loss = loss_fn();
    loss.backward();
    if (mode_ == profile::TimingMode::kSynchronized) backend::kernels_for(target().device()).synchronize();
  }
  allreduce_and_step();
  return loss;
}

void MultiNodeOptimizer::zero_grad() { target().zero_grad(); }

profile::Summary MultiNodeOptimizer::summary(std::int64_t skip_warmup) const {
  return profile::summarize(timer_, comm_.get(), skip_warmup);
}

std::unique_ptr<MultiNodeOptimizer> create_multi_node_optimizer(std::unique_ptr<optim::Optimizer> actual,
                                                                std::shared_ptr<comm::Communicator> comm,
                                                                profile::TimingMode mode) {
  return std::make_unique<MultiNodeOptimizer>(std::move(actual), std::move(comm), mode);
}

}  // namespace dpl::parallel
