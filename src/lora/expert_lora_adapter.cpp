#include "finetune/lora/expert_lora_adapter.h"

namespace finetune {

ExpertFactors ExpertLoraAdapter::factors() const {
  const int64_t rank = lora_A.size(0) / num_experts;
  ExpertFactors out;
  out.a = lora_A.view({num_experts, rank, lora_A.size(1)});                 // (E, r, in)
  out.b = lora_B.view({lora_B.size(0), rank, num_experts}).permute({2, 0, 1});  // (E, out, r)
  out.scaling = scaling;
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> ExpertLoraAdapter::named_parameters() const {
  return {{"lora_A.weight", lora_A}, {"lora_B.weight", lora_B}};
}

std::string expert_adapter_prefix(size_t index, size_t wrapped) {
  std::string prefix;
  for (size_t outer = index + 1; outer < wrapped; ++outer) prefix += "base_layer.";
  return prefix;
}

bool target_parameter_matches(const std::string& name, const std::string& target) {
  if (name == target) return true;
  const std::string suffix = "." + target;
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace finetune
