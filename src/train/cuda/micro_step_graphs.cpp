// MicroStepGraphs on CUDA: Note [Graphed micro-steps] in train/micro_step_graphs.h.
#include "finetune/train/micro_step_graphs.h"

#include <map>

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include "finetune/lora/half_precision_lora_linear.h"
#include "finetune/train/graph_batch.h"
#include "finetune/train/micro_step.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

std::string describe(const GraphShape& shape) {
  std::string out = std::to_string(shape.tokens) + " tokens, " + std::to_string(shape.targets) + " targets, " +
                    std::to_string(shape.samples) + " samples";
  if (shape.pairs > 0) out += ", " + std::to_string(shape.pairs) + " pair slots";
  if (shape.chosen_next_tokens > 0) out += ", " + std::to_string(shape.chosen_next_tokens) + " chosen next tokens";
  return out;
}

// A CUDA event without timing that a graph records as an external node (Note [Bucket all-reduces
// during a replay] in ddp/grad_reducer.h): each replay records it.
class GraphRecordedEvent {
 public:
  GraphRecordedEvent() { C10_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~GraphRecordedEvent() { C10_CUDA_CHECK_WARN(cudaEventDestroy(event_)); }
  GraphRecordedEvent(const GraphRecordedEvent&) = delete;
  GraphRecordedEvent& operator=(const GraphRecordedEvent&) = delete;
  // While `stream` is being captured.
  void record_in_capture(cudaStream_t stream) {
    C10_CUDA_CHECK(cudaEventRecordWithFlags(event_, stream, cudaEventRecordExternal));
  }
  ReadyEvent ready() const { return ReadyEvent{static_cast<void*>(event_)}; }

 private:
  cudaEvent_t event_{};
};

// The calling stream waits for everything queued on `other` so far.
void wait_for(const c10::cuda::CUDAStream& waiting, const c10::cuda::CUDAStream& other) {
  at::cuda::CUDAEvent event;
  event.record(other);
  event.block(waiting);
}

}  // namespace

struct MicroStepGraphs::State {
  struct Entry {
    GraphShape shape;
    at::Tensor inputs;  // int64, graph_batch.h's layout
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    std::vector<bool> fed;  // parameters the captured backward feeds (GradReducer::end_recording)
    // Per reducer bucket: the event the graph records where the bucket is complete (null where it
    // is not), and its ReadyEvent for the reducer (empty without config.overlap_all_reduce).
    std::vector<std::unique_ptr<GraphRecordedEvent>> bucket_events;
    std::vector<ReadyEvent> bucket_ready;
    LossAndMetrics outputs;  // the graph's: the loss sum and the objective's metric sums
  };

  const CausalLM& model;
  ForwardOptions forward;
  MicroStepGraphsConfig config;
  const Objective& objective;
  GraphSections sections;  // objective.graph_sections()
  c10::cuda::CUDAStream caller_stream;
  c10::cuda::CUDAStream training_stream;
  at::cuda::MempoolId_t pool;
  at::Tensor normaliser;  // fp32 scalar, read by every graph
  std::vector<const LinearAdapter*> adapters;
  std::map<GraphShape, Entry> entries;
  int64_t runs = 0;
  int64_t captured = 0;
  int64_t replayed = 0;

  State(const CausalLM& model, ForwardOptions forward, MicroStepGraphsConfig config, const Objective& objective)
      : model(model), forward(forward), config(config), objective(objective),
        sections(objective.graph_sections()),
        caller_stream(c10::cuda::getCurrentCUDAStream(model.device().index())),
        training_stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, model.device().index())),
        pool(at::cuda::graph_pool_handle()) {
    for (const auto& [name, linear] : model.named_linears()) {
      if (linear->adapter) adapters.push_back(linear->adapter.get());
    }
    for (const LinearAdapter* adapter : objective.swapped_in_adapters()) adapters.push_back(adapter);
    if (config.offload_activations && forward.gradient_checkpointing) {
      const auto& model_config = model.config();
      this->forward.offload_arena = std::make_shared<OffloadArena>(
          model.device(), offload_arena_bytes(config.max_tokens, model_config.hidden_size,
                                              model_config.num_hidden_layers, model.dtype()));
      this->forward.offload_activations_above_bytes = 0;
    }
  }

  // The micro-step on an entry's static inputs: what a graph captures, and what runs eagerly.
  LossAndMetrics micro_step(const Entry& entry, const at::Tensor& loss_scale) const {
    const MicroBatchInputs batch = graph_micro_batch(graph_inputs(entry.inputs, entry.shape), entry.shape);
    return forward_backward_with_metrics(model, batch, forward, objective, normaliser, loss_scale);
  }

  // `batch` in the graph layout: flattened, padded to its shape's buckets.
  GraphBatch padded(const HostBatch& batch) const {
    HostBatch flat = flatten(batch);
    flat.group_ids = batch.group_ids;  // flatten() keeps the tokens only
    return graph_batch(flat, config.filler_token_id, sections);
  }

  // The entry of `padded`'s shape (made on first use), its input buffer holding `padded`.
  Entry& entry_with_inputs(const GraphBatch& padded) {
    auto [it, inserted] = entries.try_emplace(padded.shape);
    Entry& entry = it->second;
    if (inserted) {
      entry.shape = padded.shape;
      entry.inputs = at::empty({static_cast<int64_t>(padded.values.size())},
                               at::TensorOptions().dtype(at::kLong).device(model.device()));
    }
    auto host = at::from_blob(const_cast<int64_t*>(padded.values.data()),
                              {static_cast<int64_t>(padded.values.size())}, at::TensorOptions().dtype(at::kLong));
    entry.inputs.copy_(host.pin_memory(), /*non_blocking=*/true);
    return entry;
  }

  void capture(Entry& entry, const at::Tensor& loss_scale, GradReducer& reducer) {
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    entry.bucket_events.clear();
    entry.bucket_events.resize(reducer.buckets().size());
    GradReducer::BucketFed on_bucket_fed;
    if (config.overlap_all_reduce) {
      // On autograd's device thread, whose current stream is the captured one.
      on_bucket_fed = [&entry](size_t bucket) {
        auto event = std::make_unique<GraphRecordedEvent>();
        event->record_in_capture(c10::cuda::getCurrentCUDAStream().stream());
        entry.bucket_events[bucket] = std::move(event);
      };
    }
    reducer.begin_recording(on_bucket_fed);
    try {
      // Thread-local mode: the NCCL watchdog's event queries on its own thread stay legal.
      graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      entry.outputs = micro_step(entry, loss_scale);
      graph->capture_end();
    } catch (const std::exception& e) {
      reducer.end_recording();
      throw Error("capturing a CUDA graph of a training micro-step (" + describe(entry.shape) +
                  ") failed: " + e.what() + " (--cuda_graphs false runs micro-steps without graphs)");
    }
    entry.fed = reducer.end_recording();
    entry.bucket_ready.clear();
    if (config.overlap_all_reduce) {
      for (const auto& event : entry.bucket_events) entry.bucket_ready.push_back(event ? event->ready() : ReadyEvent{});
    }
    entry.graph = std::move(graph);
    ++captured;
  }
};

MicroStepGraphs::MicroStepGraphs(const CausalLM& model, ForwardOptions forward, MicroStepGraphsConfig config,
                                 const Objective& objective)
    : state_(std::make_unique<State>(model, forward, config, objective)) {
  const std::string unsupported = micro_step_graphs_unsupported_reason(model, objective);
  if (!unsupported.empty()) throw Error("CUDA graphs of micro-steps: " + unsupported);
  state_->normaliser = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(model.device()));
  wait_for(state_->training_stream, state_->caller_stream);
  c10::cuda::setCurrentCUDAStream(state_->training_stream);
}

MicroStepGraphs::~MicroStepGraphs() {
  wait_for(state_->caller_stream, state_->training_stream);
  c10::cuda::setCurrentCUDAStream(state_->caller_stream);
}

bool MicroStepGraphs::accepts(const HostBatch& batch) const {
  const GraphShape shape = graph_shape(batch, state_->sections);
  if (shape.tokens > state_->config.max_tokens) return false;
  return state_->entries.count(shape) > 0 ||
         static_cast<int64_t>(state_->entries.size()) < state_->config.max_graphs;
}

bool MicroStepGraphs::warmed_up() const { return state_->runs >= state_->config.eager_warmup; }

void MicroStepGraphs::capture_ahead(const HostBatch& batch, const at::Tensor& loss_scale, GradReducer& reducer) {
  State& state = *state_;
  if (!state.config.capture || !warmed_up() || !accepts(batch)) return;
  const auto known = state.entries.find(graph_shape(batch, state.sections));
  if (known != state.entries.end() && known->second.graph) return;  // no layout built, nothing copied
  State::Entry& entry = state.entry_with_inputs(state.padded(batch));
  refresh_derived_tensors(state.adapters, state.model.dtype());  // as before a replay
  state.capture(entry, loss_scale, reducer);
}

LossAndMetrics MicroStepGraphs::run(const HostBatch& batch, const at::Tensor& normaliser,
                                    const at::Tensor& loss_scale, GradReducer& reducer) {
  State& state = *state_;
  State::Entry& entry = state.entry_with_inputs(state.padded(batch));
  state.normaliser.copy_(normaliser);

  const bool eager = !state.config.capture || state.runs < state.config.eager_warmup;
  ++state.runs;
  if (eager) return state.micro_step(entry, loss_scale);
  // After an optimizer step the adapters' derived tensors are refreshed here, on the host, before
  // the graph reads them (and before a capture, so that it does not capture the refresh).
  refresh_derived_tensors(state.adapters, state.model.dtype());
  if (!entry.graph) state.capture(entry, loss_scale, reducer);
  entry.graph->replay();
  reducer.add_replayed_gradients(entry.fed, entry.bucket_ready);
  ++state.replayed;
  return entry.outputs;
}

int64_t MicroStepGraphs::graphs_captured() const { return state_->captured; }
int64_t MicroStepGraphs::replays() const { return state_->replayed; }

}  // namespace finetune
