// LoRA on a mixture-of-experts model's 3-D expert stacks (model/moe_block.h), as PEFT 0.21's
// ParamWrapper does for target_parameters such as "mlp.experts.gate_up_proj":
//   weight (E, out, in); lora_A (r*E, in), expert e's rows e*r .. e*r + r - 1;
//   lora_B (out, r*E), expert e's columns e, E + e, 2E + e, ... (PEFT reshapes it (out, r, E));
//   delta_e = scaling * B_e A_e.
// PEFT names the tensors after the wrapped module, mlp.experts: with several stacks wrapped, the
// first one (gate_up_proj, in the module's parameter order) is the innermost wrapper, so its
// tensors sit under one "base_layer." per wrapper outside it (expert_adapter_prefix).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/model/moe_block.h"

namespace finetune {

class ExpertLoraAdapter : public ExpertStackAdapter {
 public:
  at::Tensor lora_A;  // (r*E, in) fp32, requires grad
  at::Tensor lora_B;  // (out, r*E) fp32, requires grad
  int64_t num_experts = 1;
  double scaling = 1.0;

  ExpertFactors factors() const override;
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const override;
};

// PEFT's name for the adapter of the stack at `index` among the `wrapped` stacks of one experts
// module that carry adapters (in parameter order): "" for the outermost, "base_layer." once per
// wrapper outside it.
std::string expert_adapter_prefix(size_t index, size_t wrapped);

// Whether PEFT's target_parameters entry `target` selects the parameter named `name`
// (model.layers.0.mlp.experts.down_proj): equal, or `name` ends with "." + target.
bool target_parameter_matches(const std::string& name, const std::string& target);

}  // namespace finetune
