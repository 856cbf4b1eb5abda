#include "finetune/lora/attach_lora.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "finetune/lora/dora_adapter.h"
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
  return out;
}

}  // namespace finetune
