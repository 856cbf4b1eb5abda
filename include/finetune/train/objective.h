// The objective seam: what a micro-batch trains. An Objective owns how a micro-batch's rows become
// a loss sum (it runs the model's forward itself, so an objective may also run a second, reference
// forward or read several rows of a group together) and what the step's loss is normalised by.
// The trainer only sums, all-reduces and back-propagates: every rank back-propagates
// loss_sum / N, N the sum of normaliser_share over the step's micro-batches on all ranks
// (Note [Global token normalisation] in train/trainer.h). A new objective is one new class.
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/data/batch.h"
#include "finetune/model/attention_mask.h"
#include "finetune/model/causal_lm.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/loss.h"

namespace finetune {

// A micro-batch's preference pairs in a CUDA graph's fixed-shape layout (train/graph_batch.h):
// `slots` pair slots, the micro-batch's B pairs first, then filler pairs that add nothing to the
// loss, its gradient or the metrics (Note [Filler pairs] in train/pair_objective.h). Laid out on
// the host, so the objective reads them without a device->host synchronisation.
struct PairSlots {
  int64_t slots = 0;              // P >= B; 0: not given (the eager layouts)
  at::Tensor sequence_of_target;  // (N) int64: the chosen sequence of slot i is i, its rejected one
                                  // P + i; a filler target (weight 0) is 2P: no sequence
  at::Tensor group_ids;           // (P) int64: each real pair's HostBatch::group_ids entry; 0 for filler
  at::Tensor real;                // (P) bool: the real pairs
  at::Tensor count;               // () fp32: B
  // Every next token of the chosen sequences, prompt included (ORPO's NLL, as
  // every_next_token_targets in train/sequence_log_probs.h finds them), then filler rows:
  TokenTargets chosen_next_tokens;      // (C) positions and ids; undefined when not asked for
  at::Tensor chosen_next_token_filler;  // (C) int64: 0 for a real row, 1 for a filler row
  at::Tensor chosen_next_token_count;   // () fp32: the real rows
};

// What a graphed micro-step's static buffer holds beyond the tokens and trained positions
// (train/graph_batch.h), as the objective reads it (Objective::graph_sections).
struct GraphSections {
  bool pairs = false;               // PairSlots
  bool chosen_next_tokens = false;  // PairSlots::chosen_next_tokens (needs pairs)
};

// One micro-batch on the model's device, in either layout the trainer runs: a DeviceBatch
// (eager) or a captured graph's static buffers (Note [Graphed micro-steps]).
struct MicroBatchInputs {
  at::Tensor input_ids;     // (B, T) int64
  at::Tensor position_ids;  // (B, T) int64
  AttentionMask mask;
  TokenTargets targets;     // the trained positions (Note [Next-token targets] in data/sample.h)
  at::Tensor token_mask;    // (B*T) fp32, 1 at real tokens; undefined: every position is one
  std::vector<int64_t> group_ids;  // the micro-batch's units, on the host (HostBatch::group_ids)
  PairSlots pairs;                 // a graph's pair slots (GraphSections::pairs); slots 0 otherwise
};
MicroBatchInputs micro_batch_inputs(const DeviceBatch& batch);

// A micro-batch's loss sum with the objective's metric sums.
struct LossAndMetrics {
  at::Tensor loss_sum;     // as Objective::loss_sum
  at::Tensor metric_sums;  // (M) fp64, detached, M = metric_names().size(); undefined when M is 0
};

class Objective {
 public:
  virtual ~Objective() = default;
  virtual std::string name() const = 0;
  // This micro-batch's share of the step's normaliser, read on the host (no device sync).
  virtual double normaliser_share(const HostBatch& batch) const = 0;
  // The micro-batch's loss sum: an fp32 scalar on the model's device, differentiable with respect
  // to the trainable parameters when forward.training is set.
  virtual at::Tensor loss_sum(const CausalLM& model, const MicroBatchInputs& batch,
                              const ForwardOptions& forward) const = 0;
  // Whether loss_and_metric_sums may be captured into a CUDA graph and replayed: no host
  // synchronisation and no host-side decision on device values inside it. A replay returns the
  // metric sums with the loss sum (train/micro_step_graphs.h).
  virtual bool graph_capturable() const = 0;
  // What the objective reads from a graph's static buffer beyond tokens and trained positions.
  virtual GraphSections graph_sections() const { return {}; }
  // Adapters outside the model's projections that loss_sum swaps in for a forward of its own
  // (DPO's frozen reference copy): a graphed micro-step brings their derived tensors up to date
  // with the model's before it is captured or replayed.
  virtual std::vector<const LinearAdapter*> swapped_in_adapters() const { return {}; }
  // The metrics the objective logs beside the loss (metrics.jsonl, TensorBoard), in this order;
  // none by default. A step's value of each is the sum of its metric sums over the step's
  // micro-batches on all ranks divided by the step's normaliser, as the loss.
  virtual std::vector<std::string> metric_names() const { return {}; }
  // loss_sum with the metric sums; without metrics, loss_sum alone.
  virtual LossAndMetrics loss_and_metric_sums(const CausalLM& model, const MicroBatchInputs& batch,
                                              const ForwardOptions& forward) const {
    return {loss_sum(model, batch, forward), at::Tensor()};
  }
};

// Note [Router load-balancing loss]
// A mixture-of-experts model whose config.json sets output_router_logits (with a non-zero
// router_aux_loss_coef) adds router_aux_loss_coef x transformers' load_balancing_loss_func over the
// micro-batch's sparse layers (model/moe_block.h; padding excluded, as transformers with the
// attention_mask) to its loss, in training and in evaluation, as transformers' MoE forward does
// whenever it is given labels. Each micro-batch's term is weighted by its trained tokens before the
// token normalisation, so a step (or an evaluation) adds the token-weighted mean of its
// micro-batches' terms (with one micro-batch, transformers' loss + coef * aux_loss exactly).
// CausalLmObjective reports that mean, without the coefficient, as its metric aux_loss; loss
// includes coef x aux_loss, as transformers' loss does.
bool adds_router_loss(const ModelConfig& config);

// A micro-batch's causal-LM forward and loss.
struct CausalLmLoss {
  at::Tensor hidden;        // (B, T, C) the final hidden states
  at::Tensor loss_sum;      // fp32 scalar: the token loss sum, plus coef x aux_loss x trained tokens
  at::Tensor aux_loss_sum;  // detached fp64 scalar: aux_loss x trained tokens; undefined without a router loss
};
// The token cross-entropy over the trained positions (transformers' ForCausalLMLoss through the
// LM head, train/loss.h) with the router term when `config` adds one (Note [Router load-balancing
// loss]); the training objective and the evaluation (train/evaluate.h) both compute it here.
// `tiling`: how the fused training loss walks the logits (train/loss.h; evaluation ignores it).
CausalLmLoss causal_lm_forward_loss(const CausalLM& model, const MicroBatchInputs& batch,
                                    const ForwardOptions& forward, LmHeadLoss tiling = kDefaultLmHeadLoss);

// Supervised fine-tuning: causal_lm_forward_loss, normalised by the step's global count of
// trained tokens. Row weights in the targets (a graph's filler rows) are honoured. Metrics: aux_loss
// when the model adds the router loss (Note [Router load-balancing loss]), else none.
class CausalLmObjective final : public Objective {
 public:
  // The objective for a model of this config (whether it adds the router loss), its training loss
  // walking the logits as `tiling` says (--lm_head_loss, train/loss.h).
  explicit CausalLmObjective(const ModelConfig& config, LmHeadLoss tiling = kDefaultLmHeadLoss);
  std::string name() const override { return "causal_lm"; }
  double normaliser_share(const HostBatch& batch) const override;
  at::Tensor loss_sum(const CausalLM& model, const MicroBatchInputs& batch,
                      const ForwardOptions& forward) const override;
  // The router loss reads only device tensors (Note [Graphed expert routing] in model/moe_block.h);
  // whether the model's layers can be captured is CausalLM::cuda_graph_safe's to say.
  bool graph_capturable() const override { return true; }
  std::vector<std::string> metric_names() const override;
  LossAndMetrics loss_and_metric_sums(const CausalLM& model, const MicroBatchInputs& batch,
                                      const ForwardOptions& forward) const override;

 private:
  bool router_loss_;  // adds_router_loss(config)
  LmHeadLoss tiling_;
};

}  // namespace finetune
