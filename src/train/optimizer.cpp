#include "finetune/train/optimizer.h"

#include "finetune/io/safetensors.h"
#include "finetune/train/adafactor.h"
#include "finetune/train/adamw.h"
#include "finetune/train/adamw_8bit.h"
#include "finetune/train/sgd.h"
#include "finetune/util/errors.h"

#include <torch/csrc/autograd/variable.h>

namespace finetune {

void mark_parameters_updated(const std::vector<at::Tensor>& parameters) {
  for (const auto& parameter : parameters) torch::autograd::impl::bump_version(parameter);
}

std::vector<StateTensorSpec> optimizer_state_layout(const std::string& optimizer, const at::Tensor& parameter) {
  if (optimizer == kAdamWTorchName) return adamw_state_layout(parameter);
  if (optimizer == kAdamW8bitName) return adamw_8bit_state_layout(parameter);
  if (optimizer == kSgdName) return {};
  if (optimizer == kAdafactorName) return adafactor_state_layout(parameter);
  throw Error("unknown optimizer '" + optimizer + "'");
}

void check_optimizer_state(const OptimizerState& state, const std::string& optimizer,
                           const std::vector<at::Tensor>& parameters) {
  if (state.optimizer != optimizer) {
    throw Error("optimizer state of " + state.optimizer + " cannot continue as " + optimizer);
  }
  if (state.parameters.size() != parameters.size()) {
    throw Error(optimizer + " state: " + std::to_string(state.parameters.size()) + " parameters' state for " +
                std::to_string(parameters.size()) + " parameters");
  }
  if (state.steps < 0) throw Error(optimizer + " state: negative step count " + std::to_string(state.steps));
  for (size_t i = 0; i < parameters.size(); ++i) {
    const auto layout = optimizer_state_layout(optimizer, parameters[i]);
    const auto& tensors = state.parameters[i];
    const std::string where = optimizer + " state of parameter " + std::to_string(i);
    if (tensors.size() != layout.size()) {
      throw Error(where + ": " + std::to_string(tensors.size()) + " tensors, expected " + std::to_string(layout.size()));
    }
    for (size_t k = 0; k < layout.size(); ++k) {
      const auto& [field, tensor] = tensors[k];
      if (field != layout[k].field) throw Error(where + ": tensor '" + field + "' where '" + layout[k].field + "' belongs");
      if (!tensor.defined() || tensor.sizes().vec() != layout[k].shape || tensor.scalar_type() != layout[k].dtype) {
        throw Error(where + ": '" + field + "' is " +
                    (tensor.defined() ? std::string(c10::toString(tensor.scalar_type())) + " " +
                                            shape_to_string(tensor.sizes().vec())
                                      : std::string("missing")) +
                    ", expected " + c10::toString(layout[k].dtype) + " " + shape_to_string(layout[k].shape));
      }
    }
  }
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<at::Tensor> parameters,
                                          const AdamWOptions& options, bool fused) {
  if (name == kAdamWTorchName) return std::make_unique<AdamW>(std::move(parameters), options, fused);
  if (name == kAdamW8bitName) return std::make_unique<AdamW8bit>(std::move(parameters), options, fused);
  // HF's Trainer gives both the scheduled lr and --weight_decay (every LoRA tensor is a decayed weight).
  if (name == kSgdName) return std::make_unique<Sgd>(std::move(parameters), options.weight_decay);
  if (name == kAdafactorName) return std::make_unique<Adafactor>(std::move(parameters), options.weight_decay);
  throw Error("unknown optimizer '" + name + "'");
}

}  // namespace finetune
