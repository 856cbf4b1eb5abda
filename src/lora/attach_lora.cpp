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
  mark_trainable_biases(model, config.bias);
  mark_modules_to_save(model, config.modules_to_save);
  return lora_parameters(model);
}

void set_lora_operand_cache(CausalLM& model, bool cache) {
  for (auto& [name, linear] : model.named_linears()) {
    auto* lora = dynamic_cast<LoraAdapter*>(linear->adapter.get());
    if (!lora) continue;
    lora->cache_operands = cache;
    if (!cache) lora->half_precision_operands.reset();
  }
}

void mark_modules_to_save(CausalLM& model, const std::vector<std::string>& modules) {
  for (const auto& module : modules) {
    const std::string why = module_to_save_refusal(module);
    if (!why.empty()) throw UsageError("--modules_to_save: '" + module + "': " + why);
  }
  if (modules.empty()) return;
  bool tied = true;
  for (const auto& [name, parameter] : model.named_parameters()) tied = tied && name != model.architecture().lm_head;
  // PEFT trains a copy of the embedding while a tied lm_head keeps the original; here they are one
  // tensor, so training it would train the head too.
  if (tied) {
    throw UsageError("--modules_to_save embed_tokens: " + model.config().architecture + " ties lm_head to "
                     "embed_tokens (tie_word_embeddings), and finetune trains the embedding in place");
  }
  for (auto& [name, parameter] : model.named_parameters()) {
    if (name == model.architecture().embed_tokens) parameter.requires_grad_(true);
  }
}

void mark_trainable_biases(CausalLM& model, const std::string& bias) {
  if (bias == "none") return;
  if (bias != "all" && bias != "lora_only") {
    throw UsageError("--bias: '" + bias + "' is not one of none, all, lora_only (PEFT's LoraConfig.bias)");
  }
  size_t linear_biases = 0;
  for (auto& [name, linear] : model.named_linears()) {
    if (!linear->bias.defined()) continue;
    ++linear_biases;
    if (bias == "all" || linear->adapter) linear->bias.requires_grad_(true);
  }
  // PEFT's "all" trains every parameter named *.bias; the families here have biases only in their
  // projections, which this checks rather than assumes.
  size_t model_biases = 0;
  for (const auto& [name, parameter] : model.named_parameters()) model_biases += ends_with(name, ".bias");
  if (bias == "all" && model_biases != linear_biases) {
    throw UsageError("--bias all: " + model.config().architecture + " has biases outside its projections, which "
                     "finetune does not train");
  }
}

void check_base_tensors_trainable(const CausalLM& model, const LoraConfig& config, bool gradient_checkpointing) {
  if (!config.modules_to_save.empty() && gradient_checkpointing) {
    throw UsageError("--modules_to_save " + join(config.modules_to_save, ",") + ": needs --use_gradient_checkpointing "
                     "false (the checkpointed layers start from a detached copy of the embedding output, so the "
                     "embedding would get no gradient)");
  }
  if (!config.modules_to_save.empty() && model.dtype() != at::kFloat) {
    throw UsageError("--modules_to_save " + join(config.modules_to_save, ",") + ": training them needs --dtype "
                     "float32 (a " + std::string(c10::toString(model.dtype())) + " embedding would be a second dtype "
                     "beside the float32 adapters in the gradient reducer and the optimizer state)");
  }
  const std::string& bias = config.bias;
  if (bias == "none") return;
  if (model.dtype() != at::kFloat) {
    throw UsageError("--bias " + bias + ": training biases needs --dtype float32 (a " +
                     std::string(c10::toString(model.dtype())) + " bias would be a second dtype beside the float32 "
                     "adapters in the gradient reducer and the optimizer state)");
  }
  if (model.projections_4bit()) {
    throw UsageError("--bias " + bias + ": biases of 4-bit projections (--load_in_4bit) cannot be trained: the 4-bit "
                     "kernel gives them no gradient");
  }
}

NamedTensors lora_parameters(const CausalLM& model) {
  NamedTensors out;
  // modules_to_save: PEFT saves the trained copy under the module's own name (model.embed_tokens.weight).
  for (const auto& [name, parameter] : model.named_parameters()) {
    if (name == model.architecture().embed_tokens && parameter.requires_grad()) out.emplace_back(kPeftPrefix + name, parameter);
  }
  for (const auto& [name, linear] : model.named_linears()) {
    if (linear->adapter) {
      for (auto& [suffix, tensor] : linear->adapter->named_parameters()) {
        out.emplace_back(kPeftPrefix + name + "." + suffix, tensor);
      }
    }
    // PEFT saves a wrapped projection's bias under its base layer (LoraLayer.base_layer).
    if (linear->bias.defined() && linear->bias.requires_grad()) {
      out.emplace_back(kPeftPrefix + name + (linear->adapter ? ".base_layer.bias" : ".bias"), linear->bias);
    }
  }
  add_expert_lora_parameters(model, out);
  return out;
}

}  // namespace finetune
