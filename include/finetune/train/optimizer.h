// The trainer's optimizer seam. --optim names the update rule (optimizer_names.h), make_optimizer
// builds it once, and the trainer and the checkpoints see only this interface: a step with a
// learning rate, the steps taken, and the state as named tensors per parameter.
//
// Note [Optimizer state layout]
// What state a parameter has depends on the optimizer and, for the 8-bit one, on the parameter's
// size (uint8 codes + fp32 absmax per moment, or fp32 moments for small tensors).
// optimizer_state_layout() is the one description of it: the optimizers build and check their
// state from it, and the checkpoint reader looks up and checks the saved tensors with it, so a
// checkpoint written by one optimizer cannot be loaded into another's buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/train/optimizer_names.h"

namespace finetune {

// HF TrainingArguments' adam_beta1, adam_beta2, adam_epsilon, weight_decay (decoupled).
struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// A parameter's optimizer state: its tensors by field name ("exp_avg", "state1", "absmax1", ...).
using ParameterState = std::vector<std::pair<std::string, at::Tensor>>;

struct OptimizerState {
  std::string optimizer = "adamw_torch";  // the optimizer_names() entry that wrote it
  int64_t steps = 0;
  std::vector<ParameterState> parameters;  // one per parameter, in parameter order
};

// One tensor of a parameter's state: Note [Optimizer state layout].
struct StateTensorSpec {
  std::string field;
  std::vector<int64_t> shape;
  at::ScalarType dtype;
};

// The state `optimizer` keeps for `parameter`; Error for a name that is no optimizer.
std::vector<StateTensorSpec> optimizer_state_layout(const std::string& optimizer, const at::Tensor& parameter);

// Error naming the parameter and field where `state` does not have `optimizer`'s layout for
// `parameters` (another optimizer, a missing or extra tensor, a shape or dtype).
void check_optimizer_state(const OptimizerState& state, const std::string& optimizer,
                           const std::vector<at::Tensor>& parameters);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update with learning rate `lr` from the parameters' current .grad.
  virtual void step(double lr) = 0;
  virtual int64_t steps_taken() const = 0;
  // The state: views of the optimizer's own tensors (for checkpoints).
  virtual OptimizerState state() const = 0;
  // Continues from a saved state (copied in); Error when check_optimizer_state refuses it.
  virtual void load_state(const OptimizerState& state) = 0;
};

// Note [Parameter versions after a step]
// Advances the parameters' version counters. Kernels that write parameters outside ATen's
// in-place operators (ATen's _fused_adamw_, which leaves them unchanged; our 8-bit AdamW kernel)
// must call this after a step: what is derived from a parameter and cached while its version
// holds (the half-precision LoRA operands, lora/half_precision_lora_linear.h) would otherwise keep
// the initial values for the whole run.
void mark_parameters_updated(const std::vector<at::Tensor>& parameters);

// The optimizer `name` (an optimizer_names() entry) over `parameters`. `fused`
// (KernelPolicy::fused_adamw, CUDA): one multi-tensor kernel for all parameters.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<at::Tensor> parameters,
                                          const AdamWOptions& options, bool fused);

}  // namespace finetune
