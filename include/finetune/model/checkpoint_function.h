// Gradient checkpointing for one decoder layer (Note [Layer recompute]).
#pragma once

#include <functional>
#include <memory>

#include <ATen/ATen.h>

#include "finetune/model/activation_offload.h"

namespace finetune {

// A layer's forward: (hidden, after_mlp_backward) -> its output. after_mlp_backward is empty in the
// first run; in the recompute the layer calls it once its MLP has back-propagated
// (LayerContext::after_mlp_backward), where the offloader starts bringing back the previous
// layer's input. A layer that never calls it only loses that overlap.
using LayerFunction = std::function<at::Tensor(const at::Tensor& hidden, const std::function<void()>& after_mlp_backward)>;

// Runs `layer(hidden, {})` without keeping its activations; backward recomputes it and
// back-propagates through the recompute. With preserve_rng_state the recompute sees the RNG state
// of the first run, so dropout masks repeat (only needed when the layer draws random numbers).
// Parameter gradients accumulate straight into their .grad, as torch.utils.checkpoint's
// reentrant variant does; `hidden` must require grad for the backward to run. With an offloader
// the layer's input waits for backward in host memory (Note [Activation offloading]) instead of
// being saved on the device.
at::Tensor checkpointed_call(const LayerFunction& layer, const at::Tensor& hidden, bool preserve_rng_state,
                             const std::shared_ptr<ActivationOffloader>& offloader = nullptr);

// The state of `device`'s default generator (what dropout draws from), and setting it back: a
// recompute in backward replays the random numbers of the first run with these.
at::Tensor default_generator_state(const at::Device& device);
void set_default_generator_state(const at::Device& device, const at::Tensor& state);

}  // namespace finetune
