#include "finetune/model/checkpoint_function.h"

#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace finetune {
namespace {

// Note [Layer recompute]
// The layer closure and the generator state of the first run travel to backward in a capsule.
// Backward re-enables grad, replays the layer on a detached copy of its input, and calls
// backward() on the recomputed output: LoRA gradients accumulate into .grad exactly as without
// checkpointing (same ops, same order), and the input's gradient is returned to the outer graph.
// With activation offloading the input is not saved: its slot in the offloader is, and backward
// restores it from host memory (Note [Activation offloading] in activation_offload.cpp).
struct RecomputeState : torch::CustomClassHolder {
  LayerFunction layer;
  std::shared_ptr<ActivationOffloader> offloader;  // null: the input is saved for backward
  size_t offload_slot = 0;
  at::Device device = at::kCPU;
  at::Tensor rng_state;  // generator state before the first run; undefined when not preserved
};

struct CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden,
                            const LayerFunction& layer, bool preserve_rng_state,
                            const std::shared_ptr<ActivationOffloader>& offloader) {
    auto state = c10::make_intrusive<RecomputeState>();
    state->layer = layer;
    state->device = hidden.device();
    if (preserve_rng_state) state->rng_state = default_generator_state(state->device);
    if (offloader) {  // started before the layer runs, so the copy overlaps it
      state->offloader = offloader;
      state->offload_slot = offloader->offload(hidden);
    } else {
      ctx->save_for_backward({hidden});
    }
    ctx->saved_data["state"] = at::IValue::make_capsule(state);
    auto output = layer(hidden, {});
    if (offloader) offloader->finish_offload(state->offload_slot);  // before the caller drops `hidden`
    return output;
  }

  static at::Tensor saved_input(torch::autograd::AutogradContext* ctx, const RecomputeState& state) {
    if (state.offloader) return state.offloader->restore(state.offload_slot);
    return ctx->get_saved_variables()[0];
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<RecomputeState>(ctx->saved_data["state"].toCapsule());
    auto input = saved_input(ctx, *state).detach().requires_grad_(true);
    const bool replay_rng = state->rng_state.defined();
    at::Tensor current_rng;
    if (replay_rng) {
      current_rng = default_generator_state(state->device);
      set_default_generator_state(state->device, state->rng_state);
    }
    // The previous layer's input comes back while this layer's attention back-propagates, not
    // through its MLP's backward (Note [Activation offloading]).
    std::function<void()> after_mlp_backward;
    if (state->offloader && state->offload_slot > 0) {
      after_mlp_backward = [offloader = state->offloader, previous = state->offload_slot - 1] {
        offloader->prefetch(previous);
      };
    }
    at::Tensor output;
    {
      at::AutoGradMode enable_grad(true);
      output = state->layer(input, after_mlp_backward);
    }
    if (replay_rng) set_default_generator_state(state->device, current_rng);
    torch::autograd::backward({output}, {grad_outputs[0]});
    return {input.grad(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor default_generator_state(const at::Device& device) {
  auto generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_default_generator_state(const at::Device& device, const at::Tensor& state) {
  auto generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

at::Tensor checkpointed_call(const LayerFunction& layer, const at::Tensor& hidden, bool preserve_rng_state,
                             const std::shared_ptr<ActivationOffloader>& offloader) {
  return CheckpointedLayer::apply(hidden, layer, preserve_rng_state, offloader);
}

}  // namespace finetune
