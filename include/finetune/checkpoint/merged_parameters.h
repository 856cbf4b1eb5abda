// The model's tensors with their adapters folded in, each merged only when its values are asked
// for: the one list both merged exports start from. The GGUF export (export/model_export.cpp,
// Note [Streamed GGUF export]) writes it as it is; the safetensors export (merged_export.h) splits
// MoE tensors into the checkpoint's per-expert tensors (Note [Expert tensors] in
// model/architecture.h) and, for merged_4bit, re-quantizes the projections.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "finetune/model/causal_lm.h"

namespace finetune {

// One tensor under the model's parameter name (CausalLM::named_parameters), with the shape and
// dtype its merged values will have.
struct MergedParameter {
  std::string name;
  std::vector<int64_t> shape;
  at::ScalarType dtype;
  // The merged values, on the model's device; a projection or stack is merged again at each call.
  std::function<at::Tensor()> values;
  const Linear* projection = nullptr;         // the projection whose weight this is, else null
  const ExpertStack* expert_stack = nullptr;  // the expert stack this is, else null
};

// In named_parameters order, then the weights of the 4-bit projections (which are not parameters)
// in name order: a projection's weight with its adapter merged (a 4-bit base dequantized first, its
// values then in the dtype the model computes in), an expert stack as ExpertStack::merged_weight
// gives it, every other parameter as it is.
std::vector<MergedParameter> merged_parameters(const CausalLM& model);

}  // namespace finetune
