#include "dpl/parallel/gradient_reducer.hpp"

#include <sstream>
#include <utility>

#include "dpl/comm/agreement.hpp"
#include "parallel/bucket_worker.hpp"

namespace dpl::parallel {

namespace {

// One line per parameter, then one per buffer: what every rank's model must agree on before
// arenas and buffers are exchanged element by element (the arena layout follows from the names,
// shapes, memory formats and order: a slot holds its parameter in the parameter's format).
std::string model_description(const nn::Module& model) {
  std::ostringstream os;
  for (const auto& [name, var] : model.named_parameters())
    os << name << ' ' << shape_str(var.shape()) << ' ' << var.dtype()
       << (var.data().memory_format() == MemoryFormat::kChannelsLast ? " channels-last" : "") << '\n';
  for (const auto& [name, var] : model.named_buffers())
    os << "buffer " << name << ' ' << shape_str(var.shape()) << ' ' << var.dtype() << '\n';
  return os.str();
}

}  // namespace

GradientReducer::GradientReducer(nn::Module& model, std::shared_ptr<comm::Communicator> comm)
    : model_(model), comm_(std::move(comm)) {
  DPL_CHECK(comm_ != nullptr, "GradientReducer: the communicator is null");
}

GradientReducer::~GradientReducer() {
  // Destroyed while armed means an error unwinds a step: the worker may be blocked in a collective
  // that the other ranks will never join, and joining it would hang the error's way out (to
  // comm::abort_all). Leave the thread and its state behind: the process is about to end.
  if (armed_) static_cast<void>(worker_.release()->abandon());
  worker_.reset();  // joins the thread first: no hook may race with its removal
  remove_hooks();
}

std::vector<Bucket> plan_buckets(const nn::ParameterArena& arena, std::size_t element_bytes,
                                 std::size_t first_bucket_bytes, std::size_t bucket_bytes) {
  DPL_CHECK(element_bytes >= 1 && first_bucket_bytes >= 1 && bucket_bytes >= 1,
            "plan_buckets: expected element and bucket sizes >= 1 byte, got element ", element_bytes,
            ", first bucket ", first_bucket_bytes, ", bucket ", bucket_bytes);
  std::vector<Bucket> out;
  const auto& entries = arena.entries();
  if (arena.numel() == 0 || entries.empty()) return out;
  Bucket current;
  current.end = arena.numel();
  for (std::size_t i = entries.size(); i-- > 0;) {
    current.parameters.insert(current.parameters.begin(), i);
    current.begin = entries[i].offset;
    const std::size_t limit = out.empty() ? first_bucket_bytes : bucket_bytes;
    const auto bytes = static_cast<std::size_t>(current.end - current.begin) * element_bytes;
    if (bytes >= limit || i == 0) {
      if (i == 0) current.begin = 0;
      out.push_back(std::move(current));
      current = Bucket();
      current.end = out.back().begin;
    }
  }
  return out;
}

void GradientReducer::set_overlap(const OverlapOptions& options) {
  DPL_CHECK(options.bucket_bytes >= 1 && options.first_bucket_bytes >= 1,
            "GradientReducer.set_overlap: expected bucket sizes >= 1 byte, got first bucket ",
            options.first_bucket_bytes, ", bucket ", options.bucket_bytes);
  DPL_CHECK(!armed_, "GradientReducer.set_overlap: a backward pass is armed; call finish_backward() first");
  overlap_ = options;
  bucket_arena_ = 0;  // re-plan at the next use
}

const std::vector<Bucket>& GradientReducer::buckets() {
  nn::ParameterArena& arena = model_.arena();
  if (bucket_arena_ == arena.id()) return buckets_;
  remove_hooks();
  buckets_ = plan_buckets(arena, dtype_size(kFloat32), overlap_.first_bucket_bytes, overlap_.bucket_bytes);
  const auto params = model_.named_parameters();
  const auto& entries = arena.entries();
  DPL_CHECK(params.size() == entries.size(), "GradientReducer: the model has ", params.size(),
            " parameters but its arena ", entries.size());
  bucket_of_.assign(entries.size(), 0);
  for (std::size_t k = 0; k < buckets_.size(); ++k)
    for (std::size_t j : buckets_[k].parameters) bucket_of_[j] = k;
  hooks_in_bucket_.assign(buckets_.size(), 0);
  for (std::size_t j = 0; j < params.size(); ++j) {
    DPL_CHECK(params[j].first == entries[j].name, "GradientReducer: parameter ", j, " is ", params[j].first,
              " but the arena's entry is ", entries[j].name);
    const Variable& v = params[j].second;
    if (!v.requires_grad()) continue;
    v.add_gradient_ready_hook(this, [this, j] { on_gradient_ready(j); });
    hooked_.push_back(v);
    ++hooks_in_bucket_[bucket_of_[j]];
  }
  bucket_arena_ = arena.id();
  return buckets_;
}

void GradientReducer::remove_hooks() {
  for (const Variable& v : hooked_) v.remove_gradient_ready_hooks(this);
  hooked_.clear();
}

void GradientReducer::on_gradient_ready(std::size_t parameter) {
  if (!armed_) return;  // a backward pass the reducer was not armed for (hand-driven training)
  const std::size_t k = bucket_of_[parameter];
  if (pending_[k] > 0 && --pending_[k] == 0) worker_->ready(k);
}

void GradientReducer::check_overlap_supported(const char* who, bool optimizer_prepares_ranges) {
  const nn::ParameterArena& arena = model_.arena();
  DPL_CHECK(optimizer_prepares_ranges || arena.dtype() == kFloat32, who, ": expected a float32 gradient arena, got ",
            arena.dtype(), ", and an optimizer that does not prepare float32 gradients range by range (wrap the ",
            "optimizer in optim::MixedPrecision, which does)");
  DPL_CHECK(comm::calls_from_other_threads_allowed(), who, ": MPI was initialised with less than ",
            "MPI_THREAD_SERIALIZED, so the allreduce cannot run on a worker thread; initialise it with ",
            "MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...) or leave it to dpl");
}

void GradientReducer::begin_backward(Tensor* local_flag, const optim::GradientRanges& ranges,
                                     const std::vector<BucketScatter>& scatter) {
  const char* who = "GradientReducer.begin_backward";
  DPL_CHECK(overlap_.enabled, who, ": overlap is off; enable it with set_overlap({true, ...}) first");
  DPL_CHECK(!armed_, who, ": a backward pass is already armed; call finish_backward() first");
  const bool prepared = ranges.gradients.defined();
  check_overlap_supported(who, prepared);
  nn::ParameterArena& arena = model_.arena();
  const Tensor grads = prepared ? ranges.gradients : arena.grads();
  DPL_CHECK(grads.dtype() == kFloat32 && grads.numel() == arena.numel() && grads.device() == arena.device(), who,
            ": expected the gradients to reduce as float32 of the arena's ", arena.numel(), " elements on ",
            arena.device(), ", got ", grads.dtype(), " of ", grads.numel(), " on ", grads.device());
  DPL_CHECK(local_flag == nullptr || (local_flag->defined() && local_flag->device() == arena.device()), who,
            ": expected the non-finite flag on ", arena.device(), ", got ",
            local_flag->defined() ? detail::concat("one on ", local_flag->device()) : std::string("an undefined one"));
  DPL_CHECK(!prepared || ranges.prepare, who, ": the optimizer's gradient ranges have no prepare function");
  const auto& plan = buckets();
  pending_ = hooks_in_bucket_;
  if (!worker_) worker_ = std::make_unique<BucketWorker>(*comm_);
  DPL_CHECK(scatter.empty() || scatter.size() == plan.size(), who, ": expected a reduce-scatter target for each of the ",
            plan.size(), " buckets, got ", scatter.size());
  const std::int64_t p = comm_->size();
  std::vector<BucketWorker::Slice> slices;
  for (std::size_t k = 0; k < plan.size(); ++k) {
    const Bucket& b = plan[k];
    slices.push_back({grads.narrow(0, b.begin, b.end - b.begin), b.begin, b.end, {}});
    if (scatter.empty()) continue;
    const BucketScatter& t = scatter[k];
    const std::int64_t n = b.end - b.begin, m = t.recv.defined() ? t.recv.numel() : -1, tail = n - p * m;
    auto on_arena = [&](const Tensor& x, std::int64_t numel) {
      return x.defined() && x.dtype() == kFloat32 && x.device() == arena.device() && x.numel() == numel;
    };
    DPL_CHECK(on_arena(t.recv, n / p) && (tail == 0 ? !t.tail_send.defined() && !t.tail_recv.defined()
                                                    : on_arena(t.tail_send, p) && on_arena(t.tail_recv, 1)),
              who, ": bucket ", k, "'s reduce-scatter buffers must be float32 on ", arena.device(), ": a receive of ",
              n / p, " elements (its ", n, " elements over ", p, " ranks)",
              n % p != 0 ? detail::concat(" and a tail of ", p, " to send and 1 to receive") : std::string(),
              ", the tail's undefined where the ranks divide the bucket");
    slices.back().scatter = t;
  }
  worker_->start(std::move(slices), comm_->options().allreduce_dtype, local_flag,
                 prepared ? ranges.prepare : BucketWorker::Prepare());
  armed_ = true;
  // A bucket of parameters that need no gradient is ready from the start.
  for (std::size_t k = 0; k < plan.size(); ++k)
    if (pending_[k] == 0) worker_->ready(k);
}

OverlapTimes GradientReducer::finish_backward() {
  DPL_CHECK(armed_, "GradientReducer.finish_backward: no backward pass is armed; call begin_backward() first");
  armed_ = false;
  communicated_ = false;  // the communicator's sub-phases would describe the last bucket only
  return worker_->finish();
}

namespace {
// Rank 0's value of one buffer on every rank; contiguous tensors are what collectives take, so a
// strided buffer goes through a copy.
void broadcast_buffer(comm::Communicator& comm, Tensor& data) {
  if (data.is_contiguous()) {
    comm.broadcast(data, 0);
    return;
  }
  Tensor packed = data.contiguous();
  comm.broadcast(packed, 0);
  data.copy_(packed);
}
}  // namespace

void GradientReducer::broadcast_parameters() {
  comm::check_ranks_agree(*comm_, model_description(model_),
                          {"GradientReducer.broadcast_parameters", "the models", "parameter",
                           "every rank must build the same parameters and buffers (names, shapes, dtypes, memory formats)"});
  nn::ParameterArena& arena = model_.arena();
  if (arena.numel() > 0) {
    Tensor params = arena.params();
    comm_->broadcast(params, 0);
  }
  // Buffers (running statistics and the like) are state too: every rank starts from rank 0's.
  // They are few and this runs once per arena, so one broadcast each is cheap enough.
  for (auto& [name, var] : model_.named_buffers()) {
    Tensor data = var.data();
    if (data.numel() > 0) broadcast_buffer(*comm_, data);
  }
  broadcast_arena_ = arena.id();
}

void GradientReducer::synchronize_buffers() {
  if (comm_->size() == 1) return;
  std::vector<Variable> floats;
  std::int64_t total = 0;
  for (auto& [name, var] : model_.named_buffers()) {
    Tensor data = var.data();
    if (data.numel() == 0) continue;
    if (is_float_dtype(data.dtype())) {
      floats.push_back(var);
      total += data.numel();
      continue;
    }
    broadcast_buffer(*comm_, data);
  }
  if (floats.empty()) return;
  // One allreduce for all of them: BatchNorm's statistics are many small tensors.
  Tensor packed = Tensor::empty({total}, TensorOptions(kFloat32, model_.device()));
  std::int64_t offset = 0;
  for (const Variable& var : floats) {
    const Tensor& data = var.data();
    packed.narrow(0, offset, data.numel()).copy_(data.to(kFloat32).reshape({data.numel()}));
    offset += data.numel();
  }
  comm_->allreduce(packed, comm::ReduceOp::kMean);
  offset = 0;
  for (const Variable& var : floats) {
    Tensor data = var.data();
    data.copy_(packed.narrow(0, offset, data.numel()).reshape(data.shape()).to(data.dtype()));
    offset += data.numel();
  }
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
  communicated_ = arena.numel() > 0 && comm_->size() > 1;
  if (!communicated_) return;
  for (std::size_t i = 1; i < buffers.size(); ++i) {
    Tensor small = buffers[i];
    comm_->allreduce(small, comm::ReduceOp::kMean);
  }
  Tensor grads = buffers.front();
  comm_->allreduce(grads, comm::ReduceOp::kMean, comm_->options().allreduce_dtype);
}

bool GradientReducer::needs_broadcast() { return model_.arena().id() != broadcast_arena_; }

const std::vector<comm::SubPhase>& GradientReducer::last_phases() const {
  static const auto* none = new std::vector<comm::SubPhase>();  // never destroyed: outlives every reducer
  return communicated_ ? comm_->last_phases() : *none;
}

namespace {
// The caller's communicator, borrowed for one call: the aliasing constructor with no owner.
std::shared_ptr<comm::Communicator> borrowed(comm::Communicator& comm) {
  return std::shared_ptr<comm::Communicator>(std::shared_ptr<comm::Communicator>(), &comm);
}
}  // namespace

void broadcast_parameters(nn::Module& model, comm::Communicator& comm) {
  GradientReducer(model, borrowed(comm)).broadcast_parameters();
}

void allreduce_gradients(nn::Module& model, comm::Communicator& comm) {
  GradientReducer(model, borrowed(comm)).allreduce_gradients();
}

}  // namespace dpl::parallel
