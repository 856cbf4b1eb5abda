#include "finetune/train/micro_step_graphs.h"

// CUDA builds implement MicroStepGraphs in cuda/micro_step_graphs.cpp.
#ifndef FINETUNE_WITH_CUDA
#include "finetune/util/errors.h"

namespace finetune {

struct MicroStepGraphs::State {};

MicroStepGraphs::MicroStepGraphs(const CausalLM&, ForwardOptions, MicroStepGraphsConfig) {
  throw Error("CUDA graphs of micro-steps: this build has no CUDA support");
}
MicroStepGraphs::~MicroStepGraphs() = default;
bool MicroStepGraphs::accepts(const HostBatch&) const { return false; }
at::Tensor MicroStepGraphs::run(const HostBatch&, const at::Tensor&, const at::Tensor&, GradReducer&) { return {}; }
int64_t MicroStepGraphs::graphs_captured() const { return 0; }
int64_t MicroStepGraphs::replays() const { return 0; }

}  // namespace finetune
#endif
