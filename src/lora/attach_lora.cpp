#include "finetune/lora/attach_lora.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "finetune/lora/dora_adapter.h"
#include "finetune/lora/expert_lora_adapter.h"
#include "finetune/lora/lora_adapter.h"
#include "finetune/model/architecture.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

const std::string kPeftPrefix = "base_model.model.";

std::string leaf_name(const std::string& module_name) {
  return module_name.substr(module_name.rfind('.') + 1);
}

// Adapters on the expert stacks config.target_parameters selects (PEFT's ParamWrapper,
// expert_lora_adapter.h), drawn after the projections' from the same generator.
void attach_expert_lora(CausalLM& model, const LoraConfig& config, at::Generator& generator) {
  std::set<std::string> matched;
  for (auto& [name, stack] : model.named_expert_stacks()) {
    bool selected = false;
    for (const auto& target : config.target_parameters) {
      if (!target_parameter_matches(name, target)) continue;
      selected = true;
      matched.insert(target);
    }
    if (!selected) continue;
    // PEFT's ParamWrapper refuses these too (lora.ParamWrapper does not work with ...).
    if (config.lora_dropout > 0) throw UsageError("--target_parameters: LoRA on expert tensors takes no --lora_dropout");
    if (config.use_dora) throw UsageError("--target_parameters: DoRA on expert tensors is not supported (nor by PEFT)");
    const int64_t experts = stack->num_experts();
    const int64_t smaller = std::min(stack->in_features(), stack->out_features());
    if (config.r > smaller)
      throw UsageError("--r: " + std::to_string(config.r) + " is larger than " + name + "'s smaller dimension (" +
                       std::to_string(smaller) + "); use --r <= " + std::to_string(smaller));
    auto adapter = std::make_shared<ExpertLoraAdapter>();
    const double bound = 1.0 / std::sqrt(static_cast<double>(stack->in_features()));
    auto lora_A = at::empty({config.r * experts, stack->in_features()}, at::TensorOptions().dtype(at::kFloat));
    lora_A.uniform_(-bound, bound, generator);
    adapter->lora_A = lora_A.to(model.device()).requires_grad_(true);
    adapter->lora_B = at::zeros({stack->out_features(), config.r * experts},
                                at::TensorOptions().dtype(at::kFloat).device(model.device()))
                          .requires_grad_(true);
    adapter->num_experts = experts;
    adapter->scaling = lora_scaling(config);
    stack->adapter = std::move(adapter);
  }
  for (const auto& target : config.target_parameters) {
    if (matched.count(target) == 0) {
      std::string valid;
      for (const auto& [name, stack] : model.named_expert_stacks()) valid = name.substr(name.find(".mlp.") + 1);
      throw UsageError("--target_parameters: '" + target + "' matches no expert tensor of " +
                       model.config().architecture +
                       (valid.empty() ? std::string(" (it has none)") : " (e.g. mlp.experts.gate_up_proj, mlp.experts.down_proj)"));
    }
  }
}

// The expert adapters' tensors with PEFT's names (Note in expert_lora_adapter.h on nesting).
void add_expert_lora_parameters(const CausalLM& model, NamedTensors& out) {
  std::vector<std::pair<std::string, const ExpertStack*>> module_stacks;  // one experts module's adapted stacks
  std::string module;
  const auto flush = [&]() {
    for (size_t i = 0; i < module_stacks.size(); ++i) {
      for (auto& [suffix, tensor] : module_stacks[i].second->adapter->named_parameters())
        out.emplace_back(kPeftPrefix + module + "." + expert_adapter_prefix(i, module_stacks.size()) + suffix, tensor);
    }
    module_stacks.clear();
  };
  for (const auto& [name, stack] : model.named_expert_stacks()) {
    const std::string owner = name.substr(0, name.rfind('.'));
    if (owner != module) flush();
    module = owner;
    if (stack->adapter) module_stacks.emplace_back(name, stack);
  }
  flush();
}

}  // namespace

NamedTensors attach_lora(CausalLM& model, const LoraConfig& config, uint64_t random_state) {
  const std::set<std::string> targets(config.target_modules.begin(), config.target_modules.end());
  std::set<std::string> matched;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(random_state);
  const auto fp32_cpu = at::TensorOptions().dtype(at::kFloat);
  const double scaling = lora_scaling(config);
  // The rank bounds every allocation below: check it against every target before allocating.
  for (const auto& [name, linear] : model.named_linears()) {
    if (targets.count(leaf_name(name)) == 0) continue;
    const int64_t smaller = std::min(linear->in_features(), linear->out_features());
    if (config.r > smaller) {
      throw UsageError("--r: " + std::to_string(config.r) + " is larger than " + name + "'s smaller dimension (" +
                       std::to_string(linear->in_features()) + " x " + std::to_string(linear->out_features()) +
                       "): a LoRA of that rank adds nothing a rank-" + std::to_string(smaller) +
                       " one cannot; use --r <= " + std::to_string(smaller));
    }
  }
  for (auto& [name, linear] : model.named_linears()) {
    const auto leaf = leaf_name(name);
    if (targets.count(leaf) == 0) continue;
    matched.insert(leaf);
    LoraAdapter lora;
    // kaiming_uniform_(a=sqrt(5)) on (r, in): gain sqrt(2/(1+5)), bound gain*sqrt(3/fan_in) = 1/sqrt(fan_in).
    const double bound = 1.0 / std::sqrt(static_cast<double>(linear->in_features()));
    auto lora_A = at::empty({config.r, linear->in_features()}, fp32_cpu);
    lora_A.uniform_(-bound, bound, generator);
    lora.lora_A = lora_A.to(model.device()).requires_grad_(true);
    lora.lora_B = at::zeros({linear->out_features(), config.r}, fp32_cpu.device(model.device())).requires_grad_(true);
    lora.scaling = scaling;
    lora.dropout = config.lora_dropout;
    lora.kernels = model.kernel_policy();
    if (config.use_dora) {
      linear->adapter = std::make_unique<DoraAdapter>(std::move(lora), *linear);
    } else {
      linear->adapter = std::make_unique<LoraAdapter>(std::move(lora));
    }
  }
  attach_expert_lora(model, config, generator);
  for (const auto& target : targets) {
    if (matched.count(target) == 0) {
      throw UsageError("--target_modules: '" + target + "' matches no linear layer of " + model.config().architecture +
                       " (valid: " + join(lora_target_names(model.architecture()), ", ") + ")");
    }
  }
  return lora_parameters(model);
}

NamedTensors lora_parameters(const CausalLM& model) {
  NamedTensors out;
  for (const auto& [name, linear] : model.named_linears()) {
    if (!linear->adapter) continue;
    for (auto& [suffix, tensor] : linear->adapter->named_parameters()) {
      out.emplace_back(kPeftPrefix + name + "." + suffix, tensor);
    }
  }
  add_expert_lora_parameters(model, out);
  return out;
}

}  // namespace finetune
