// GradReducer: see grad_reducer.h for the design.
//
// Note [Gradients are views into bucket buffers]
// Before the first backward every parameter's .grad is set to a view into its bucket's flat
// buffer. AccumulateGrad then adds in place (grad mode is off during backward), so a bucket's
// buffer already holds its gradients when the last of them lands: the all-reduce runs on the
// buffer itself and the reduced values are the .grad tensors, with no copy either way. This
// holds as long as nobody replaces .grad (zero_grad(set_to_none), create_graph=true): finalize()
// checks it and names the parameter otherwise.
#include "finetune/ddp/grad_reducer.h"

#include <mutex>
#include <optional>
#include <sstream>

#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "finetune/ddp/ddp_error.h"
#include "finetune/ddp/param_verification.h"
#include "finetune/util/text.h"

namespace finetune {

struct GradReducer::State {
  struct Parameter {
    std::string name;
    at::Tensor tensor;
    size_t bucket = 0;
    at::Tensor grad_view;     // into buckets[bucket].buffer, Note [Gradients are views into bucket buffers]
    bool ready = false;       // its gradient landed in this synchronised backward
    bool got_gradient = false;  // ... in any micro-step since the last finalize()
  };
  struct Bucket {
    std::vector<size_t> parameters;
    at::Tensor buffer;  // (sum of numels,) flat
    size_t pending = 0;
    std::unique_ptr<CollectiveWork> work;
    ReadyEvent ready;  // set by a replay: launch after this event, Note [Bucket all-reduces during a replay]
  };

  class MarkGradientReady : public torch::autograd::PostAccumulateGradHook {
   public:
    MarkGradientReady(State* state, size_t index) : state_(state), index_(index) {}
    void operator()(const torch::autograd::Variable&) override { state_->mark_ready(index_); }

   private:
    State* state_;
    size_t index_;
  };

  State(Communicator& communicator, GradReducerOptions options) : communicator(communicator), options(options) {}

  Communicator& communicator;
  GradReducerOptions options;
  std::vector<Parameter> parameters;
  std::vector<std::vector<size_t>> bucket_indices;
  std::vector<Bucket> buckets;

  std::mutex mutex;  // hooks may run on autograd's device threads
  bool prepared = false;
  bool sync = true;
  bool recording = false;
  std::vector<bool> recorded;  // while recording: the parameters whose gradient landed
  std::vector<size_t> recording_pending;  // while recording: per bucket, its parameters yet to land
  BucketFed on_bucket_fed;
  size_t next_bucket = 0;  // buckets before this one are launched

  void mark_ready(size_t index);
  void launch_ready_buckets_in_order();
  // The bitmap of the ranks where each parameter got no gradient, all-reduced (world, P) on the
  // parameters' device; enqueued, not waited for. Several ranks only.
  at::Tensor all_reduce_unused_bitmap();
  std::vector<std::vector<int>> ranks_without_gradient(const at::Tensor& host_table) const;
  std::vector<std::vector<int>> ranks_without_gradient_here() const;
  void throw_if_unused(const std::vector<std::vector<int>>& missed) const;

  // Note [Deferred verdict]: a finalize()'s bitmap, on its way to the host.
  struct PendingVerdict {
    at::Tensor host_table;            // pinned on CUDA; filled once `copied` has completed
    std::optional<c10::Event> copied;  // CUDA only
  };
  std::optional<PendingVerdict> pending_verdict;
  void settle_pending_verdict();
  std::string bucket_description(size_t b) const {
    return "gradient all-reduce of bucket " + std::to_string(b) + " (" + std::to_string(buckets[b].parameters.size()) +
           " parameters, first " + parameters[buckets[b].parameters.front()].name + ")";
  }
};

void GradReducer::State::mark_ready(size_t index) {
  std::lock_guard<std::mutex> lock(mutex);
  Parameter& parameter = parameters[index];
  if (recording) {
    if (!recorded[index]) {
      recorded[index] = true;
      if (--recording_pending[parameter.bucket] == 0 && on_bucket_fed) on_bucket_fed(parameter.bucket);
    }
    return;
  }
  if (!prepared) {
    throw Error("GradReducer: gradient of " + parameter.name + " arrived without prepare_for_backward()");
  }
  parameter.got_gradient = true;
  if (!sync) return;  // no_sync: accumulate locally only
  if (parameter.ready) {
    // Its bucket may already be in flight: a second accumulation would race with the all-reduce.
    throw distributed_error(communicator.rank(), "gradient reduction",
                            "got the gradient of " + parameter.name +
                                " twice in one synchronised backward (two backward passes per micro-step?)");
  }
  parameter.ready = true;
  if (--buckets[parameter.bucket].pending == 0) launch_ready_buckets_in_order();
}

// Strictly in bucket order, so every rank issues the same sequence of collectives even when
// gradients land in a different order.
void GradReducer::State::launch_ready_buckets_in_order() {
  while (next_bucket < buckets.size() && buckets[next_bucket].pending == 0) {
    Bucket& bucket = buckets[next_bucket];
    const std::string what = bucket_description(next_bucket);
    bucket.work = bucket.ready.cuda_event != nullptr ? communicator.all_reduce_after(bucket.buffer, what, bucket.ready)
                                                     : communicator.all_reduce_async(bucket.buffer, what);
    bucket.ready = ReadyEvent{};
    ++next_bucket;
  }
}

// Note [Every rank decides the same]: per parameter, the ranks where it got no gradient since the
// last finalize(), the same answer on every rank. An all-gather through all_reduce: each rank fills
// its own row. Issued after the bucket all-reduces, in the same order on every rank; a single
// process needs no collective.
at::Tensor GradReducer::State::all_reduce_unused_bitmap() {
  const int64_t count = static_cast<int64_t>(parameters.size());
  const at::Device device = parameters.front().tensor.device();
  auto host_options = at::TensorOptions().dtype(at::kFloat).pinned_memory(device.is_cuda());
  at::Tensor unused = at::zeros({communicator.world_size(), count}, host_options);  // (world, P)
  auto row = unused.accessor<float, 2>()[communicator.rank()];
  for (int64_t i = 0; i < count; ++i) row[i] = parameters[static_cast<size_t>(i)].got_gradient ? 0.0f : 1.0f;
  // From pinned memory the copy is queued on the stream; a pageable one would wait for the backward.
  at::Tensor on_device = unused.to(device, /*non_blocking=*/true);
  communicator.all_reduce(on_device, "used-parameter bitmap all-reduce");
  return on_device;
}

std::vector<std::vector<int>> GradReducer::State::ranks_without_gradient(const at::Tensor& host_table) const {
  std::vector<std::vector<int>> missed(parameters.size());
  const auto table = host_table.accessor<float, 2>();
  for (int64_t r = 0; r < table.size(0); ++r) {
    for (int64_t i = 0; i < table.size(1); ++i) {
      if (table[r][i] != 0.0f) missed[static_cast<size_t>(i)].push_back(static_cast<int>(r));
    }
  }
  return missed;
}

std::vector<std::vector<int>> GradReducer::State::ranks_without_gradient_here() const {
  std::vector<std::vector<int>> missed(parameters.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!parameters[i].got_gradient) missed[i].push_back(communicator.rank());
  }
  return missed;
}

void GradReducer::State::settle_pending_verdict() {
  if (!pending_verdict) return;
  PendingVerdict verdict = std::move(*pending_verdict);
  pending_verdict.reset();
  if (verdict.copied) verdict.copied->synchronize();  // long done: it was queued a step ago
  if (!options.find_unused_parameters) throw_if_unused(ranks_without_gradient(verdict.host_table));
}

void GradReducer::State::throw_if_unused(const std::vector<std::vector<int>>& missed) const {
  std::vector<std::string> unused;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (missed[i].empty()) continue;
    std::vector<std::string> ranks;
    for (int r : missed[i]) ranks.push_back(std::to_string(r));
    unused.push_back(parameters[i].name + " (on rank " + join(ranks, ", ") + ")");
  }
  if (unused.empty()) return;
  throw distributed_error(communicator.rank(), "gradient reduction",
                          "found " + std::to_string(unused.size()) + " parameter(s) that received no gradient: " +
                              join(unused, ", ") +
                              " (not part of the loss? enable find_unused_parameters to reduce zeros for them)");
}

GradReducer::GradReducer(std::vector<std::pair<std::string, at::Tensor>> parameters, Communicator& communicator,
                         GradReducerOptions options)
    : state_(std::make_unique<State>(communicator, options)) {
  std::vector<int64_t> bytes;
  for (auto& [name, tensor] : parameters) {
    if (!tensor.defined() || !tensor.requires_grad() || !tensor.is_leaf()) {
      throw Error("GradReducer: parameter " + name + " must be a leaf tensor that requires grad");
    }
    const at::Tensor& first = parameters.front().second;
    if (tensor.scalar_type() != first.scalar_type() || tensor.device() != first.device()) {
      throw Error("GradReducer: parameter " + name + " is " + c10::toString(tensor.scalar_type()) + " on " +
                  tensor.device().str() + " but " + parameters.front().first + " is " +
                  c10::toString(first.scalar_type()) + " on " + first.device().str() +
                  " (one dtype and device per reducer)");
    }
    bytes.push_back(tensor.numel() * static_cast<int64_t>(tensor.element_size()));
    State::Parameter parameter;
    parameter.name = name;
    parameter.tensor = tensor;
    state_->parameters.push_back(std::move(parameter));
  }
  state_->bucket_indices = assign_buckets(bytes, options.first_bucket_bytes, options.bucket_cap_bytes);

  for (size_t b = 0; b < state_->bucket_indices.size(); ++b) {
    State::Bucket bucket;
    bucket.parameters = state_->bucket_indices[b];
    int64_t total = 0;
    for (size_t index : bucket.parameters) total += state_->parameters[index].tensor.numel();
    bucket.buffer = at::zeros({total}, state_->parameters[bucket.parameters.front()].tensor.options().requires_grad(false));
    int64_t offset = 0;
    for (size_t index : bucket.parameters) {
      State::Parameter& parameter = state_->parameters[index];
      const int64_t numel = parameter.tensor.numel();
      parameter.bucket = b;
      parameter.grad_view = bucket.buffer.narrow(0, offset, numel).view(parameter.tensor.sizes());
      offset += numel;
      if (parameter.tensor.grad().defined()) parameter.grad_view.copy_(parameter.tensor.grad());
      parameter.tensor.mutable_grad() = parameter.grad_view;
    }
    state_->buckets.push_back(std::move(bucket));
  }

  for (size_t index = 0; index < state_->parameters.size(); ++index) {
    const State::Parameter& parameter = state_->parameters[index];
    if (torch::autograd::impl::post_acc_grad_hooks(parameter.tensor)) {
      throw Error("GradReducer: parameter " + parameter.name + " already has a post-accumulate-grad hook");
    }
    torch::autograd::impl::set_post_acc_grad_hooks(parameter.tensor,
                                                   std::make_unique<State::MarkGradientReady>(state_.get(), index));
  }
}

GradReducer::~GradReducer() {
  for (auto& parameter : state_->parameters) {
    if (torch::autograd::impl::post_acc_grad_hooks(parameter.tensor)) {
      torch::autograd::impl::set_post_acc_grad_hooks(parameter.tensor, nullptr);
    }
  }
}

void GradReducer::prepare_for_backward(bool sync) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->prepared && state_->sync && state_->next_bucket > 0) {
    throw Error("GradReducer: prepare_for_backward() before finalize() of the previous synchronised micro-step");
  }
  state_->prepared = true;
  state_->sync = sync;
  state_->next_bucket = 0;
  for (auto& parameter : state_->parameters) parameter.ready = false;
  for (auto& bucket : state_->buckets) {
    bucket.pending = bucket.parameters.size();
    bucket.work.reset();
    bucket.ready = ReadyEvent{};
  }
}

// Note [Every rank decides the same]
// Whether a parameter went unused is decided from the all-reduced used-parameter bitmap (c10d's
// rule), never from one rank's own flags: a rank that decided alone would throw while its peers
// wait in the bucket all-reduces, released only by an abort. So every rank first finishes the
// same collectives (each unused parameter contributes zeros, so its bucket can be reduced), then
// all-reduces the bitmap (one row per rank: who missed what), and all reach the same verdict:
// with find_unused_parameters the zeros stand (a mixture-of-experts expert that no token reached
// still takes part), without it every rank throws the same error naming the parameters and ranks.
void GradReducer::finalize() {
  State& state = *state_;
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.prepared) throw Error("GradReducer: finalize() without prepare_for_backward()");
  state.settle_pending_verdict();  // the previous step's, Note [Deferred verdict]
  if (!state.sync) {
    throw Error("GradReducer: finalize() after a no_sync micro-step; call prepare_for_backward(true) before the "
                "last micro-step's backward");
  }
  // Note [Gradients are views into bucket buffers]: the reduction only reaches .grad through the view.
  for (const auto& parameter : state.parameters) {
    const at::Tensor grad = parameter.tensor.grad();
    if (!grad.defined() || grad.data_ptr() != parameter.grad_view.data_ptr()) {
      throw Error("GradReducer: the .grad of " + parameter.name +
                  " is no longer a view into its gradient bucket (set to None, or replaced by create_graph?)");
    }
  }
  for (auto& parameter : state.parameters) {
    if (!parameter.got_gradient) parameter.grad_view.zero_();  // unused here: contribute zeros
    if (!parameter.ready) {
      // Unused here, or its gradient came in an earlier no_sync micro-step only.
      parameter.ready = true;
      --state.buckets[parameter.bucket].pending;
    }
  }
  state.launch_ready_buckets_in_order();
  // Note [Every rank decides the same]: from the all-reduced bitmap, read now or a step later.
  std::optional<std::vector<std::vector<int>>> missed;
  if (state.parameters.empty()) {
    missed.emplace();
  } else if (state.communicator.world_size() == 1) {
    missed = state.ranks_without_gradient_here();
  } else {
    const at::Tensor reduced = state.all_reduce_unused_bitmap();
    if (state.options.defer_verdict) {
      State::PendingVerdict verdict;
      verdict.host_table = at::empty(reduced.sizes(), reduced.options().device(at::kCPU).pinned_memory(reduced.is_cuda()));
      verdict.host_table.copy_(reduced, /*non_blocking=*/true);
      if (reduced.is_cuda()) {
        verdict.copied.emplace(reduced.device().type());
        verdict.copied->record(c10::impl::getDeviceGuardImpl(reduced.device().type())->getStream(reduced.device()));
      }
      state.pending_verdict = std::move(verdict);
    } else {
      missed = state.ranks_without_gradient(reduced.cpu());
    }
  }
  for (auto& bucket : state.buckets) {
    bucket.work->wait();
    bucket.work.reset();
  }
  state.prepared = false;
  state.next_bucket = 0;
  for (auto& parameter : state.parameters) parameter.got_gradient = false;
  if (missed && !state.options.find_unused_parameters) state.throw_if_unused(*missed);
}

void GradReducer::settle() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->settle_pending_verdict();
}

void GradReducer::zero_grad() {
  for (auto& bucket : state_->buckets) bucket.buffer.zero_();
}

void GradReducer::begin_recording(BucketFed on_bucket_fed) {
  State& state = *state_;
  std::lock_guard<std::mutex> lock(state.mutex);
  state.recording = true;
  state.recorded.assign(state.parameters.size(), false);
  state.recording_pending.clear();
  for (const auto& bucket : state.buckets) state.recording_pending.push_back(bucket.parameters.size());
  state.on_bucket_fed = std::move(on_bucket_fed);
}

std::vector<bool> GradReducer::end_recording() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->recording = false;
  state_->on_bucket_fed = nullptr;
  return std::move(state_->recorded);
}

void GradReducer::add_replayed_gradients(const std::vector<bool>& fed, const std::vector<ReadyEvent>& bucket_ready) {
  State& state = *state_;
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.prepared) throw Error("GradReducer: replayed gradients without prepare_for_backward()");
  if (fed.size() != state.parameters.size()) {
    throw Error("GradReducer: replayed gradients name " + std::to_string(fed.size()) + " parameters, the reducer has " +
                std::to_string(state.parameters.size()));
  }
  if (!bucket_ready.empty() && bucket_ready.size() != state.buckets.size()) {
    throw Error("GradReducer: replayed gradients have " + std::to_string(bucket_ready.size()) +
                " bucket events, the reducer has " + std::to_string(state.buckets.size()) + " buckets");
  }
  for (size_t i = 0; i < fed.size(); ++i) {
    if (fed[i]) state.parameters[i].got_gradient = true;
  }
  if (bucket_ready.empty() || !state.sync) return;
  // Note [Bucket all-reduces during a replay]: the replay's gradients arrive as an eager backward's would.
  for (size_t i = 0; i < fed.size(); ++i) {
    State::Parameter& parameter = state.parameters[i];
    if (!fed[i] || parameter.ready) continue;
    parameter.ready = true;
    --state.buckets[parameter.bucket].pending;
  }
  for (size_t b = state.next_bucket; b < state.buckets.size(); ++b) {
    if (state.buckets[b].pending == 0) state.buckets[b].ready = bucket_ready[b];
  }
  state.launch_ready_buckets_in_order();
}

void GradReducer::broadcast_parameters() {
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& parameter : state_->parameters) named.emplace_back(parameter.name, parameter.tensor);
  // Same names and shapes everywhere first: a broadcast of different sizes would hang or corrupt.
  verify_params_across_processes(named, state_->communicator);
  if (state_->parameters.empty()) return;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> flat_parts;
  for (const auto& parameter : state_->parameters) flat_parts.push_back(parameter.tensor.detach().reshape({-1}));
  at::Tensor flat = at::cat(flat_parts);  // (total numel,)
  state_->communicator.broadcast(flat, 0, "broadcast of the initial parameters from rank 0");
  int64_t offset = 0;
  for (auto& parameter : state_->parameters) {
    const int64_t numel = parameter.tensor.numel();
    parameter.tensor.detach().copy_(flat.narrow(0, offset, numel).view(parameter.tensor.sizes()));
    offset += numel;
  }
}

void GradReducer::check_parameters_consistent(const std::string& when) {
  const auto& parameters = state_->parameters;
  if (parameters.empty()) return;
  Communicator& communicator = state_->communicator;
  const int rank = communicator.rank();
  const int world_size = communicator.world_size();
  const int64_t count = static_cast<int64_t>(parameters.size());
  at::NoGradGuard no_grad;

  // An all-gather through all_reduce: each rank fills its own row, the others stay zero.
  const auto options = parameters.front().tensor.options().dtype(at::kDouble).requires_grad(false);
  at::Tensor checksums = at::zeros({world_size, count, 2}, options);  // (world, P, [sum, sum of squares])
  for (int64_t i = 0; i < count; ++i) {
    const at::Tensor values = parameters[i].tensor.detach().to(at::kDouble);
    checksums[rank][i][0].copy_(values.sum());
    checksums[rank][i][1].copy_(values.square().sum());
  }
  communicator.all_reduce(checksums, "parameter checksum all-gather (" + when + ")");
  const at::Tensor host = checksums.cpu();
  const auto table = host.accessor<double, 3>();

  std::vector<std::string> differing;
  std::string first_detail;
  for (int64_t i = 0; i < count; ++i) {
    std::vector<int> ranks;
    for (int r = 1; r < world_size; ++r) {
      if (table[r][i][0] != table[0][i][0] || table[r][i][1] != table[0][i][1]) ranks.push_back(r);
    }
    if (ranks.empty()) continue;
    differing.push_back(parameters[i].name);
    if (first_detail.empty()) {
      std::ostringstream detail;
      detail.precision(17);
      detail << parameters[i].name << " differs from rank 0 on rank(s)";
      for (int r : ranks) detail << " " << r;
      detail << " (rank 0: sum " << table[0][i][0] << ", sum of squares " << table[0][i][1] << "; rank " << ranks[0]
             << ": sum " << table[ranks[0]][i][0] << ", sum of squares " << table[ranks[0]][i][1] << ")";
      first_detail = detail.str();
    }
  }
  if (!differing.empty()) {
    throw distributed_error(rank, "parameter consistency check (" + when + ")",
                            "failed: " + first_detail + "; " + std::to_string(differing.size()) +
                                " parameter(s) differ in total: " + join(differing, ", "));
  }
}

const std::vector<std::vector<size_t>>& GradReducer::buckets() const { return state_->bucket_indices; }

}  // namespace finetune
