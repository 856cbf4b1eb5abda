#include "finetune/checkpoint/merged_parameters.h"

#include <map>

namespace finetune {
namespace {

// The projection's weight with its adapter folded in (a 4-bit base dequantized first).
MergedParameter merged_projection(const std::string& name, const Linear& linear) {
  const auto dtype = linear.is_4bit() ? linear.compute_dtype : linear.weight.scalar_type();
  return {name, {linear.out_features(), linear.in_features()}, dtype,
          [&linear] { return linear.adapter ? linear.adapter->merged_weight(linear) : linear.dense_weight(); },
          &linear, nullptr};  // (out, in)
}

// The stack with its adapter folded in; `parameter` is its weight (meta for a 4-bit base).
MergedParameter merged_stack(const std::string& name, const at::Tensor& parameter, const ExpertStack& stack) {
  return {name, parameter.sizes().vec(), parameter.scalar_type(), [&stack] { return stack.merged_weight(); },
          nullptr, &stack};  // (E, out, in)
}

}  // namespace

std::vector<MergedParameter> merged_parameters(const CausalLM& model) {
  std::map<std::string, const Linear*> projection_of_weight;
  for (const auto& [name, linear] : model.named_linears()) projection_of_weight[name + ".weight"] = linear;
  std::map<std::string, const ExpertStack*> expert_stacks;
  for (const auto& [name, stack] : model.named_expert_stacks()) expert_stacks[name] = stack;
  std::vector<MergedParameter> out;
  for (const auto& [name, parameter] : model.named_parameters()) {
    auto stack = expert_stacks.find(name);
    auto projection = projection_of_weight.find(name);
    if (stack != expert_stacks.end()) {
      out.push_back(merged_stack(name, parameter, *stack->second));
    } else if (projection != projection_of_weight.end()) {
      out.push_back(merged_projection(name, *projection->second));
      projection_of_weight.erase(projection);
    } else {
      out.push_back({name, parameter.sizes().vec(), parameter.scalar_type(),
                     [parameter = parameter] { return parameter; }, nullptr, nullptr});
    }
  }
  for (const auto& [name, linear] : projection_of_weight) {  // 4-bit bases: their weights are not parameters
    out.push_back(merged_projection(name, *linear));
  }
  return out;
}

}  // namespace finetune
