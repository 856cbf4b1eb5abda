#include "finetune/train/micro_step_graphs.h"

#include "finetune/model/kernel_policy.h"

namespace finetune {

bool micro_step_graphs_supported(const CausalLM& model, const Objective& objective) {
  return model.kernel_policy().cuda_graphs && model.cuda_graph_safe() && objective.graph_capturable();
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
int64_t MicroStepGraphs::graphs_captured() const { return 0; }
int64_t MicroStepGraphs::replays() const { return 0; }

}  // namespace finetune
#endif
