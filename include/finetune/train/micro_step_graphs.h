// CUDA graphs of whole training micro-steps, for the small micro-batches where the host is the
// bottleneck (the seed setting: batch 1, ~200 tokens, ~190 operators per layer issued one by one).
//
// Note [Graphed micro-steps]
// Each micro-step's forward, layer recompute, loss and backward (into the gradient buckets): the
// same forward_backward_with_metrics() an eager micro-step runs (train/micro_step.h), is captured
// once per GraphShape (train/graph_batch.h: the row padded to a token bucket with one label-free
// filler sample, the trained positions to a target bucket with weight-0 rows) and replayed for
// every later micro-step of that shape: one launch instead of thousands.
//  - Inputs: one int64 device buffer per shape, filled by one host->device copy before a replay;
//    the global token count and the loss scale are device scalars the graph reads.
//  - Gradients: the .grad tensors are views into the reducer's buckets when a graph is captured
//    (ddp/grad_reducer.h), so each replay's AccumulateGrad adds into them in place. Gradient hooks
//    run while capturing, not on replay: the reducer records then which parameters the graph
//    feeds; after each replay the reducer is told, and finalize() launches the buckets'
//    all-reduces, in bucket order on every rank, outside any graph. With overlap_all_reduce the
//    graph also records an event where each bucket is complete, and a synchronised replay launches
//    those buckets' all-reduces after their events (Note [Bucket all-reduces during a replay] in
//    ddp/grad_reducer.h).
//  - One stream: while this object lives training runs on a side stream (capture needs a
//    non-default stream; autograd runs each backward op on its forward op's stream).
//  - Outputs: the loss sum and the objective's metric sums (Objective::loss_and_metric_sums), which
//    the trainer adds to the step's sums as it adds an eager micro-step's.
//  - One memory pool for all graphs: they run one at a time, and each keeps only its outputs.
//  - Warm-up: the first micro-steps run the same code without capture, so libraries initialise
//    lazily (handles, workspaces) outside any capture.
//  - Offloaded inputs (MicroStepGraphsConfig::offload_activations): the copies out and back are
//    part of each graph, into one pinned host arena allocated here before any capture.
//
// Note [Capture ahead]
// A capture costs about one eager micro-step of host time plus the graph's instantiation (~110 ms
// for Llama-3.2-1B on an H100), and a run meets rare shapes (long rows) for hundreds of steps: each
// stalls the step it first appears in, and under DDP every rank with it. So once the warm-up is
// over the trainer reads the micro-batches of the coming steps from its stream (and rewinds it) and
// captures every shape they need at once (capture_ahead); shapes beyond that horizon are still
// captured when first met. Capturing runs no kernels: gradients and parameters are untouched.
// The trainer does this for every objective, the preference commands' pair micro-batches too
// (their stream rewinds with the group ids: tests/data/test_micro_batch_stream.cpp).
//  - Exactness: a replay runs the kernels that an eager run of the same padded layout runs, so the
//    adapters are bitwise identical with capture on or off, captured ahead or when first met
//    (tests/cuda/test_micro_step_graphs.cpp, test_preference_micro_step_graphs.cpp; deterministic
//    algorithms on). Against the unpadded layout only the summation order of the weight
//    gradients (over more rows) and the GEMM shapes differ.
//  - Preference objectives (dpo, orpo): the pairs are padded to a pair bucket with filler pairs
//    that add nothing (Note [Filler pairs] in train/pair_objective.h); DPO's reference forward is
//    captured in the same graph, its adapters swapped on the host while capturing (the swap is
//    fixed per graph; the reference copy's derived tensors are refreshed with the model's,
//    Objective::swapped_in_adapters), and precomputed reference log-probs are read by the
//    pairs' group ids from the static buffer.
//  - Soft-capped attention (Gemma-2) is not graphed: it walks the samples on the host.
//  - Mixture-of-experts layers are graphed where their expert GEMMs run grouped with offsets on
//    the device (Note [Graphed expert routing] in model/moe_block.h, decided from the sizes, the
//    adapter ranks and the GPU); the router loss counts the real tokens only (the filler's are
//    masked out: graph_micro_batch) and the trained rows by their weights.
//  - Not graphed (the trainer runs them eagerly): LoRA dropout (its random draws), 4-bit expert
//    stacks, DoRA (not yet verified under capture: CausalLM::cuda_graph_safe), objectives that
//    are not graph_capturable, rows over max_tokens, new shapes once max_graphs are captured, the
//    CPU (micro_step_graphs_supported).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <ATen/ATen.h>

#include "finetune/data/batch.h"
#include "finetune/ddp/grad_reducer.h"
#include "finetune/model/causal_lm.h"
#include "finetune/train/micro_step_graph_limits.h"
#include "finetune/train/objective.h"

namespace finetune {

struct MicroStepGraphsConfig {
  // Rows padded beyond this run eagerly: there a dense model's GPU work outlasts the host's issuing
  // even for a 1B model, and long packed rows would make many micro-steps new shapes to capture.
  // The trainer sets default_graph_max_tokens (longer for mixture-of-experts models).
  int64_t max_tokens = kCudaGraphMaxTokens;
  int64_t max_graphs = kCudaGraphMaxShapes;  // shapes first seen after this many captures run eagerly
  int64_t eager_warmup = 2;    // micro-steps run without capture first
  bool capture = true;         // false: the same padded micro-steps, eagerly (for tests)
  int64_t filler_token_id = 0;
  // With gradient checkpointing (the forward options'), every micro-step's checkpointed layer
  // inputs go to host memory (Note [Activation offloading]): into one pinned arena sized for
  // max_tokens, which all graphs share (Note [Offload arena]). --offload_activations true.
  bool offload_activations = false;
  // Note [Bucket all-reduces during a replay] (FINETUNE_GRAPHED_ALL_REDUCE=overlapped); false
  // (the default): every bucket's all-reduce after the replay, in finalize().
  bool overlap_all_reduce = false;
};

// The longest micro-step graphed unless a run says otherwise (MicroStepGraphsConfig::max_tokens):
// kCudaGraphMaxTokensSparse for a mixture-of-experts model, kCudaGraphMaxTokens for a dense one and
// whenever activations are offloaded (the pinned arena is sized for it, Note [Offload arena]).
int64_t default_graph_max_tokens(const ModelConfig& config, bool offload_activations);

// Whether micro-steps of `model` under `objective` can be graphed: KernelPolicy::cuda_graphs (a
// CUDA build and device with padding-free batches: the padded graph layout keeps its filler
// sample apart through them), a cuda_graph_safe() model and a graph_capturable objective.
bool micro_step_graphs_supported(const CausalLM& model, const Objective& objective);
// Why not, for the log (the objective's reason first, then the model's, then the kernels'); empty
// when they can.
std::string micro_step_graphs_unsupported_reason(const CausalLM& model, const Objective& objective);

class MicroStepGraphs {
 public:
  // Error unless micro_step_graphs_supported(model, objective). `objective` must outlive this.
  MicroStepGraphs(const CausalLM& model, ForwardOptions forward, MicroStepGraphsConfig config,
                  const Objective& objective);
  ~MicroStepGraphs();
  MicroStepGraphs(const MicroStepGraphs&) = delete;
  MicroStepGraphs& operator=(const MicroStepGraphs&) = delete;

  // Whether `batch` (the collated micro-batch) is run here rather than eagerly.
  bool accepts(const HostBatch& batch) const;

  // forward_backward_with_metrics() of `batch` with the step's normaliser (and loss_scale when
  // defined): gradients accumulate into the parameters' .grad. Call reducer.prepare_for_backward
  // first, as for an eager micro-step. Returns the loss sum (fp32 device scalar) and the metric
  // sums (fp64, undefined without metrics), valid until the next call.
  LossAndMetrics run(const HostBatch& batch, const at::Tensor& normaliser, const at::Tensor& loss_scale,
                     GradReducer& reducer);

  // Whether the eager warm-up micro-steps have run (from then on captures are allowed).
  bool warmed_up() const;
  // Note [Capture ahead]: captures the graph for `batch`'s shape now, when accepts(batch), the
  // warm-up is over and the shape has none; otherwise nothing. No kernels run.
  void capture_ahead(const HostBatch& batch, const at::Tensor& loss_scale, GradReducer& reducer);

  int64_t graphs_captured() const;
  int64_t replays() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace finetune
