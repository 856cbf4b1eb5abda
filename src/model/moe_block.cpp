#include "finetune/model/moe_block.h"

#include "finetune/model/expert_dispatch.h"
#include "finetune/model/expert_gemms.h"
#include "finetune/model/swiglu.h"
#include "finetune/quant/nf4_stack.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// Note [Grouped expert GEMMs]: _grouped_mm runs bf16 on the GPU, with every row stride a multiple
// of 16 bytes (8 bf16 values) in both operands (an adapter's rank included).
bool stack_runs_grouped(const ExpertStack& stack, const at::Device& device) {
  bool aligned = stack.in_features() % 8 == 0 && stack.out_features() % 8 == 0;
  if (stack.adapter) aligned = aligned && stack.adapter->factors().a.size(1) % 8 == 0;
  return device.is_cuda() && stack.weight.scalar_type() == at::kBFloat16 && aligned;
}

bool grouped_mm_applies(const at::Tensor& rows, const ExpertStack& stack) {
  return rows.scalar_type() == at::kBFloat16 && stack_runs_grouped(stack, rows.device());
}

// rows (M, in) sorted by expert -> rows_e W_e^T plus the adapter's update (M, out). Grouped: PEFT
// folds the update into the bf16 weight (get_delta_factors casts both factors to it); per expert:
// the update in the adapter's dtype and the sum cast back (as dense LoRA, lora/lora_adapter.h).
at::Tensor stack_forward(const ExpertStack& stack, const at::Tensor& rows, const ExpertGemmPlan& plan) {
  auto out = stack.is_4bit() ? experts_gemm_4bit(stack, rows, plan) : experts_gemm(stack.weight, rows, plan);
  if (!stack.adapter) return out;
  const auto factors = stack.adapter->factors();
  if (plan.grouped) {
    const auto a = factors.a.to(at::kBFloat16);                  // (E, r, in)
    const auto b = factors.b.to(at::kBFloat16).contiguous();     // (E, out, r)
    const auto low = experts_gemm(a, rows, plan);                // (M, r)
    return out + experts_gemm(b, low, plan) * factors.scaling;  // (M, out)
  }
  const auto low = experts_gemm(factors.a, rows.to(factors.a.scalar_type()), plan);  // (M, r)
  const auto delta = experts_gemm(factors.b, low, plan) * factors.scaling;           // (M, out)
  return (out + delta).to(out.scalar_type());
}

ExpertGemmPlan gemm_plan(const MoeLayer& layer, const at::Tensor& rows, const at::Tensor& counts) {
  ExpertGemmPlan plan;
  plan.grouped = grouped_mm_applies(rows, layer.gate_up_proj) && grouped_mm_applies(rows, layer.down_proj);
  if (plan.grouped) {
    plan.offsets = counts.cumsum(0).to(at::kInt);  // (E) int32, on the device
  } else {
    const auto host_counts = counts.to(at::kCPU).contiguous();
    const auto* count = host_counts.data_ptr<int64_t>();
    plan.counts.assign(count, count + host_counts.numel());
  }
  return plan;
}

// rows (M, C) sorted by expert, `counts` (E) int64 -> each row through its expert's SwiGLU MLP (M, C).
at::Tensor expert_mlps(const MoeLayer& layer, const at::Tensor& rows, const at::Tensor& counts,
                       const KernelPolicy& kernels) {
  const int64_t width = layer.down_proj.in_features();
  const auto plan = gemm_plan(layer, rows, counts);
  const auto gate_up = stack_forward(layer.gate_up_proj, rows, plan);  // (M, 2I)
  const auto activation = swiglu_gate_up(gate_up, width, kernels);      // (M, I)
  return stack_forward(layer.down_proj, activation, plan);  // (M, C)
}

at::Tensor dense_mlp_forward(const MoeLayer& layer, const at::Tensor& x, const KernelPolicy& kernels, bool training) {
  const auto gate = linear_forward(layer.dense_mlp[0], x, training);
  const auto up = linear_forward(layer.dense_mlp[1], x, training);
  return linear_forward(layer.dense_mlp[2], swiglu(gate, up, kernels), training);
}

}  // namespace

at::Tensor ExpertStack::dense_weight() const {
  return weight_4bit ? dequantize_nf4_stack(*weight_4bit, weight.scalar_type()) : weight;
}

at::Tensor ExpertStack::merged_weight() const {
  if (!adapter) return dense_weight();
  const auto factors = adapter->factors();
  const auto delta = at::bmm(factors.b, factors.a) * factors.scaling;  // (E, out, in) in the adapter's dtype
  return (dense_weight().to(at::kFloat) + delta.to(at::kFloat)).to(weight.scalar_type());
}

bool moe_layer_graph_safe(const MoeLayer& layer, const at::Device& device) {
  if (!layer.sparse) return true;
  for (const ExpertStack* stack : {&layer.gate_up_proj, &layer.down_proj}) {
    if (stack->is_4bit() || !stack_runs_grouped(*stack, device)) return false;
  }
  return grouped_gemms_sync_free(device);
}

MoeLayer make_moe_layer(const Architecture& architecture, const ModelConfig& config, int64_t layer,
                        const at::TensorOptions& options, bool projections_4bit) {
  if (!architecture.moe || !config.moe) throw Error("make_moe_layer: " + config.architecture + " has no experts");
  const MoeConfig& moe = *config.moe;
  MoeLayer out;
  out.sparse = layer_is_sparse(config, layer);
  if (out.sparse) {
    const int64_t width = moe.moe_intermediate_size;
    const auto stack_options = projections_4bit ? options.device(at::kMeta) : options;  // Note [4-bit expert stacks]
    out.router = at::empty({moe.num_experts, config.hidden_size}, options);
    out.gate_up_proj.weight = at::empty({moe.num_experts, 2 * width, config.hidden_size}, stack_options);
    out.down_proj.weight = at::empty({moe.num_experts, config.hidden_size, width}, stack_options);
    return out;
  }
  for (const auto& module : architecture.moe->dense_mlp_modules) {
    Linear linear;
    linear.compute_dtype = c10::typeMetaToScalarType(options.dtype());
    linear.weight = at::empty(layer_module_weight_shape(module, config),
                              projections_4bit ? options.device(at::kMeta) : options);
    out.dense_mlp.push_back(std::move(linear));
  }
  if (out.dense_mlp.size() != 3) throw Error(config.architecture + ": a dense layer needs gate, up and down projections");
  return out;
}

Routing route_tokens(const at::Tensor& router, const at::Tensor& x, const MoeConfig& config) {
  Routing routing;
  routing.logits = at::linear(x, router);                             // (N, E)
  const auto probabilities = at::softmax(routing.logits, -1, at::kFloat);  // (N, E) fp32
  auto [weights, experts] = at::topk(probabilities, config.num_experts_per_tok, -1);  // (N, k)
  if (config.norm_topk_prob) weights = weights / weights.sum(-1, /*keepdim=*/true);
  if (config.routing_weights_in_model_dtype) weights = weights.to(routing.logits.scalar_type());
  routing.weights = weights;
  routing.experts = experts;
  return routing;
}

at::Tensor experts_forward(const MoeLayer& layer, const at::Tensor& x, const Routing& routing, const MoeConfig& config,
                           const KernelPolicy& kernels) {
  const auto flat_experts = routing.experts.reshape({-1});  // (N*k)
  const auto dispatch = plan_expert_dispatch(routing.experts);
  // Rows per expert (E), without the host sync bincount's output sizing would cost on the GPU.
  const auto counts = at::zeros({config.num_experts}, flat_experts.options())
                          .scatter_add(0, flat_experts, at::ones_like(flat_experts));
  const bool fused = kernels.fused_elementwise;
  const auto rows = dispatch_rows(x, dispatch, fused);                        // (N*k, C) sorted by expert
  const auto outputs = expert_mlps(layer, rows, counts, kernels);             // (N*k, C)
  return combine_rows(outputs, routing.weights, dispatch, fused).to(x.scalar_type());  // (N, C)
}

at::Tensor moe_mlp_forward(const MoeLayer& layer, const at::Tensor& x, const ModelConfig& config,
                           const KernelPolicy& kernels, bool training, std::vector<at::Tensor>* router_logits) {
  if (!layer.sparse) return dense_mlp_forward(layer, x, kernels, training);
  const auto flat = x.reshape({-1, x.size(-1)});  // (N, C)
  const auto routing = route_tokens(layer.router, flat, *config.moe);
  if (router_logits) router_logits->push_back(routing.logits);
  return experts_forward(layer, flat, routing, *config.moe, kernels).view(x.sizes());
}

at::Tensor load_balancing_loss(const std::vector<at::Tensor>& router_logits, int64_t num_experts, int64_t top_k,
                               const at::Tensor& row_mask) {
  if (router_logits.empty()) throw Error("load_balancing_loss: no router logits (no sparse layer ran)");
  const auto options = at::TensorOptions().dtype(at::kFloat).device(router_logits.front().device());
  auto tokens_per_expert = at::zeros({num_experts}, options);
  auto probability_per_expert = at::zeros({num_experts}, options);
  auto rows = at::zeros({}, options);
  for (const auto& logits : router_logits) {
    const auto probabilities = at::softmax(logits, -1);  // (N, E) in the logits' dtype, as transformers
    const auto chosen = std::get<1>(at::topk(probabilities, top_k, -1)).reshape({-1});  // (N*k)
    const auto mask = row_mask.defined() ? row_mask.to(options) : at::ones({logits.size(0)}, options);  // (N)
    const auto mask_per_choice = mask.unsqueeze(1).expand({mask.size(0), top_k}).reshape({-1});  // (N*k)
    tokens_per_expert = tokens_per_expert + at::zeros({num_experts}, options).scatter_add(0, chosen, mask_per_choice);
    probability_per_expert = probability_per_expert + (probabilities.to(at::kFloat) * mask.unsqueeze(-1)).sum(0);
    rows = rows + mask.sum();
  }
  return (tokens_per_expert / rows * (probability_per_expert / rows)).sum() * static_cast<double>(num_experts);
}

}  // namespace finetune
