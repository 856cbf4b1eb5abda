#include "finetune/train/micro_step_graphs.h"

#include "finetune/model/kernel_policy.h"

namespace finetune {

int64_t default_graph_max_tokens(const ModelConfig& config, bool offload_activations) {
  return config.moe && !offload_activations ? kCudaGraphMaxTokensSparse : kCudaGraphMaxTokens;
}

bool micro_step_graphs_supported(const CausalLM& model, const Objective& objective) {
  return micro_step_graphs_unsupported_reason(model, objective).empty();
}

std::string micro_step_graphs_unsupported_reason(const CausalLM& model, const Objective& objective) {
  if (!objective.graph_capturable()) return "the " + objective.name() + " objective cannot be captured";
  if (!model.cuda_graph_safe()) {
    return "the model's adapters or weights cannot be replayed (LoRA dropout, DoRA, soft-capped attention, or "
           "mixture-of-experts layers with 4-bit experts or without grouped expert GEMMs on the device)";
  }
  if (!model.kernel_policy().cuda_graphs) {
    return "its kernels have no CUDA graphs (a CUDA build and device, 16-bit weights and padding-free batches)";
  }
  return "";
}

}  // namespace finetune

// CUDA builds implement MicroStepGraphs in cuda/micro_step_graphs.cpp.
#ifndef FINETUNE_WITH_CUDA
#include "finetune/util/errors.h"

namespace finetune {

struct MicroStepGraphs::State {};

MicroStepGraphs::MicroStepGraphs(const CausalLM&, ForwardOptions, MicroStepGraphsConfig, const Objective&) {
  throw Error("CUDA graphs of micro-steps: this build has no CUDA support");
}
MicroStepGraphs::~MicroStepGraphs() = default;
bool MicroStepGraphs::accepts(const HostBatch&) const { return false; }
LossAndMetrics MicroStepGraphs::run(const HostBatch&, const at::Tensor&, const at::Tensor&, GradReducer&) { return {}; }
bool MicroStepGraphs::warmed_up() const { return false; }
void MicroStepGraphs::capture_ahead(const HostBatch&, const at::Tensor&, GradReducer&) {}
int64_t MicroStepGraphs::graphs_captured() const { return 0; }
int64_t MicroStepGraphs::replays() const { return 0; }

}  // namespace finetune
#endif
