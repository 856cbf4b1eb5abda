// The sparse (mixture-of-experts) MLP of Qwen3-MoE and Mixtral, as transformers 5.17 computes it,
// and the dense SwiGLU MLP of Qwen3-MoE's mlp_only layers:
//
//   x (N, C) -> router logits x W_r^T (N, E) -> softmax in fp32 -> top-k (weights, experts)
//     [-> weights / their sum when norm_topk_prob] [-> the model dtype: Qwen3-MoE]
//   rows sorted by expert -> per expert: down(silu(gate(x_e)) * up(x_e)) -> times the row's weight
//     -> summed back per token (transformers: index_add_ in expert order; here a gather of each
//     token's k rows summed in fp32, Note [Gathered expert dispatch] in expert_dispatch.h).
//
// Note [Grouped expert GEMMs]
// The rows routed to each expert are gathered once, sorted by expert id (stable), so expert e's
// rows are one contiguous slice. On the GPU in bf16 each projection of all experts is one
// at::_grouped_mm over those slices (offsets: int32 cumulative row counts, no host sync); elsewhere
// (the CPU, fp32, or shapes _grouped_mm refuses) one GEMM per expert that received rows. An expert
// no row reached runs nothing; its adapter slices get zero gradients (the adapter tensors are one
// tensor per stack, so every rank's reducer sees them used).
//
// Note [Graphed expert routing]
// With the grouped GEMMs reading their offsets on the device, a sparse layer's forward and
// backward read nothing back to the host and make no shape from device values, so a CUDA graph
// can replay them (Note [Graphed micro-steps] in train/micro_step_graphs.h): the router's linear,
// softmax and top-k; the stable argsort of the assignments and its inverse permutation; the rows
// per expert by scatter_add (bincount would size its output on the host) and their cumsum as the
// offsets; the dispatch and combine gathers (expert_dispatch.h), the _grouped_mm kernels; their
// gradients; and the load-balancing loss (top-k, scatter_add and sums). Every size is N*k rows,
// fixed by the shape. The per-expert fallback copies the counts to the host and sizes each GEMM
// from them, so a model is graph-safe only where every sparse layer runs grouped
// (moe_layer_graph_safe), which its sizes, adapter ranks, dtype and device decide once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/io/model_config.h"
#include "finetune/model/architecture.h"
#include "finetune/model/kernel_policy.h"
#include "finetune/model/linear.h"

namespace finetune {

struct Nf4Stack;  // quant/nf4_stack.h

// One expert stack's low-rank update, per expert e: delta_e = scaling * b[e] a[e] (out, in).
struct ExpertFactors {
  at::Tensor a;  // (E, r, in)
  at::Tensor b;  // (E, out, r)
  double scaling = 1.0;
};

// An adapter of a 3-D expert stack (PEFT's ParamWrapper over mlp.experts.<stack>), implemented by
// lora/ (Note [Projection seam] in linear.h: model/ knows nothing of how it is trained).
class ExpertStackAdapter {
 public:
  virtual ~ExpertStackAdapter() = default;
  // Views of the trainable tensors, differentiable.
  virtual ExpertFactors factors() const = 0;
  // The trainable tensors named relative to the wrapper (PEFT: "lora_A.weight", "lora_B.weight").
  virtual std::vector<std::pair<std::string, at::Tensor>> named_parameters() const = 0;
};

// One projection of every expert: weight (E, out, in) in the model dtype, and its adapter.
//
// Note [4-bit expert stacks]
// With --load_in_4bit the stack keeps only its NF4 pieces (quant/nf4_stack.h: one bitsandbytes
// quantize_4bit per expert and projection, as the per-expert nn.Linear modules of transformers 4.x
// and the hub's bnb-4bit MoE checkpoints hold them) and `weight` is a meta tensor of the stack's
// shape and dtype. Each GEMM over the stack dequantizes it to the model dtype right before it runs,
// and the backward pass dequantizes it again instead of keeping it (model/expert_gemms.h), so at
// most one stack's 16-bit weights exist at a time outside a recompute.
struct ExpertStack {
  at::Tensor weight;
  std::shared_ptr<const Nf4Stack> weight_4bit;  // the 4-bit base, or null when `weight` is dense
  std::shared_ptr<ExpertStackAdapter> adapter;

  bool is_4bit() const { return weight_4bit != nullptr; }
  int64_t num_experts() const { return weight.size(0); }
  int64_t out_features() const { return weight.size(1); }
  int64_t in_features() const { return weight.size(2); }
  // The base weight (E, out, in) in the model dtype: `weight`, or the 4-bit pieces dequantized
  // (a fresh tensor each call, so never keep it beyond the product it feeds).
  at::Tensor dense_weight() const;
  // The base weight with the adapter's update folded in (PEFT's merge: fp32 sum, rounded once), in
  // the model dtype; a 4-bit base dequantized first.
  at::Tensor merged_weight() const;
};

// The MLP of one layer of a MoE architecture: sparse (router and expert stacks) or dense
// (MoeLayout::dense_mlp_modules, in that order: gate_proj, up_proj, down_proj).
struct MoeLayer {
  bool sparse = false;
  at::Tensor router;      // (E, C)
  ExpertStack gate_up_proj;  // (E, 2I, C): gate rows, then up rows
  ExpertStack down_proj;     // (E, C, I)
  std::vector<Linear> dense_mlp;
};

// Layer `layer`'s MLP with uninitialised tensors of `options`. With `projections_4bit` a dense
// layer's projections and a sparse layer's expert stacks get shape-only (meta) weights that the
// loader replaces by 4-bit ones (Note [4-bit base weights] in linear.h, Note [4-bit expert
// stacks]); the router stays in the model dtype, as transformers keeps it.
MoeLayer make_moe_layer(const Architecture& architecture, const ModelConfig& config, int64_t layer,
                        const at::TensorOptions& options, bool projections_4bit);

// Whether a CUDA graph can capture the layer's forward and backward on `device` (Note [Graphed
// expert routing]): a dense layer, or a sparse one whose 16-bit stacks (4-bit ones are not verified
// under capture) run as grouped GEMMs (bf16, sizes and adapter ranks multiples of 8) that read their
// offsets on the device (grouped_gemms_sync_free).
bool moe_layer_graph_safe(const MoeLayer& layer, const at::Device& device);

// The router's choice for x (N, C): logits (N, E) in x's dtype, weights (N, k) (fp32, or the
// model dtype where the config says so) and experts (N, k) int64.
struct Routing {
  at::Tensor logits;
  at::Tensor weights;
  at::Tensor experts;
};
Routing route_tokens(const at::Tensor& router, const at::Tensor& x, const MoeConfig& config);

// The experts' weighted sum for x (N, C) under `routing` -> (N, C) in x's dtype.
at::Tensor experts_forward(const MoeLayer& layer, const at::Tensor& x, const Routing& routing, const MoeConfig& config,
                           const KernelPolicy& kernels);

// The layer's MLP: x (B, T, C), already normed -> (B, T, C). A sparse layer appends its router
// logits (B*T, E) to `router_logits` when given (the load-balancing loss reads them).
at::Tensor moe_mlp_forward(const MoeLayer& layer, const at::Tensor& x, const ModelConfig& config,
                           const KernelPolicy& kernels, bool training, std::vector<at::Tensor>* router_logits);

// transformers' load_balancing_loss_func over the sparse layers' router logits (each (N, E), the
// same N rows): E * sum_e f_e P_e with f_e the share of top-k assignments and P_e the mean router
// probability of expert e, both summed over layers and divided by the rows counted over all layers;
// `row_mask` (N) float, 1 for rows that count (attention_mask), or undefined for all rows. fp32 scalar.
at::Tensor load_balancing_loss(const std::vector<at::Tensor>& router_logits, int64_t num_experts, int64_t top_k,
                               const at::Tensor& row_mask);

}  // namespace finetune
