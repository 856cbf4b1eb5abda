#include "finetune/model/sequence_tiling.h"

#include <algorithm>

#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "finetune/model/checkpoint_function.h"

namespace finetune {
namespace {

// Note [Sequence-tiled MLP]
// An MLP treats every token alone, so it can run over the sequence a tile at a time; what makes a
// long row run out of memory is its (tokens x intermediate) gate, up and activation tensors (on an
// 8B model 3 x 12,288 values a token, 12x the layer's input). The forward pass computes tile after
// tile without autograd, so each tile's intermediates die with it. Backward recomputes one tile at
// a time with autograd on and asks autograd::grad for the gradients of the tile's input and of the
// trained parameters; the parameters' are summed over the tiles and returned as this node's
// gradients, so each parameter's .grad takes one accumulation per backward (the DDP reducer's
// post-accumulate hook fires once, as it must: grad_reducer.cpp) — unlike a tile-per-checkpoint
// scheme, whose per-tile backward would accumulate each parameter once per tile. Nested in a layer
// recompute (Note [Layer recompute]) this is the layer's third pass through its MLP, which is why
// it runs only above kMlpTileBytes.
struct TiledCallState : torch::CustomClassHolder {
  TokenFunction function;
  int64_t tile_tokens = 0;
  at::Device device = at::kCPU;
  std::vector<at::Tensor> rng_states;  // per tile: the generator state before its first run; empty when not preserved
};

struct TileSpec {
  TokenFunction function;
  int64_t tile_tokens;
  bool preserve_rng_state;
};

// function over x's tiles, without autograd: x (N, C_in) -> (N, C_out). rng_states (when given)
// receives each tile's generator state before its run.
at::Tensor run_tiles(const TokenFunction& function, const at::Tensor& x, int64_t tile_tokens,
                     std::vector<at::Tensor>* rng_states) {
  at::Tensor out;
  const int64_t tokens = x.size(0);
  for (int64_t start = 0; start < tokens; start += tile_tokens) {
    const int64_t n = std::min(tile_tokens, tokens - start);
    if (rng_states) rng_states->push_back(default_generator_state(x.device()));
    const auto tile = function(x.narrow(0, start, n));  // (n, C_out)
    if (!out.defined()) out = at::empty({tokens, tile.size(1)}, tile.options());
    out.narrow(0, start, n).copy_(tile);
  }
  return out;
}

struct TiledTokenCall : public torch::autograd::Function<TiledTokenCall> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::TensorList& parameters,
                            const TileSpec& spec) {
    auto state = c10::make_intrusive<TiledCallState>();
    state->function = spec.function;
    state->tile_tokens = spec.tile_tokens;
    state->device = x.device();
    auto out = run_tiles(spec.function, x, spec.tile_tokens, spec.preserve_rng_state ? &state->rng_states : nullptr);
    ctx->saved_data["state"] = at::IValue::make_capsule(state);
    std::vector<at::Tensor> saved{x};
    saved.insert(saved.end(), parameters.begin(), parameters.end());
    ctx->save_for_backward(saved);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<TiledCallState>(ctx->saved_data["state"].toCapsule());
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const std::vector<at::Tensor> parameters(saved.begin() + 1, saved.end());
    const bool x_needs_grad = ctx->needs_input_grad(0);
    const auto& grad_out = grad_outputs[0];  // (N, C_out)
    auto grad_x = x_needs_grad ? at::empty_like(x) : at::Tensor();
    std::vector<at::Tensor> grad_parameters(parameters.size());
    const at::Tensor current_rng = state->rng_states.empty() ? at::Tensor() : default_generator_state(state->device);
    const int64_t tokens = x.size(0);
    for (int64_t start = 0, tile = 0; start < tokens; start += state->tile_tokens, ++tile) {
      const int64_t n = std::min(state->tile_tokens, tokens - start);
      if (!state->rng_states.empty()) set_default_generator_state(state->device, state->rng_states[tile]);
      auto rows = x.narrow(0, start, n).detach().requires_grad_(x_needs_grad);
      std::vector<at::Tensor> inputs;
      if (x_needs_grad) inputs.push_back(rows);
      std::vector<size_t> trained;  // indices into parameters, in `inputs` order after rows
      for (size_t i = 0; i < parameters.size(); ++i) {
        if (parameters[i].requires_grad()) {
          inputs.push_back(parameters[i]);
          trained.push_back(i);
        }
      }
      at::Tensor tile_out;
      {
        at::AutoGradMode enable_grad(true);
        tile_out = state->function(rows);
      }
      const auto grads = torch::autograd::grad({tile_out}, inputs, {grad_out.narrow(0, start, n)},
                                               /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
      size_t next = 0;
      if (x_needs_grad) {
        if (grads[next].defined()) grad_x.narrow(0, start, n).copy_(grads[next]);
        else grad_x.narrow(0, start, n).zero_();
        ++next;
      }
      for (const size_t i : trained) {
        const auto& grad = grads[next++];
        if (!grad.defined()) continue;
        grad_parameters[i] = grad_parameters[i].defined() ? grad_parameters[i] + grad : grad;
      }
    }
    if (current_rng.defined()) set_default_generator_state(state->device, current_rng);
    torch::autograd::variable_list out{grad_x};
    out.insert(out.end(), grad_parameters.begin(), grad_parameters.end());
    out.emplace_back();  // the TileSpec
    return out;
  }
};

}  // namespace

int64_t mlp_tile_tokens(int64_t intermediate_size, at::ScalarType dtype, int64_t budget_bytes) {
  const int64_t bytes_per_token = 3 * intermediate_size * static_cast<int64_t>(c10::elementSize(dtype));
  return std::max<int64_t>(1, budget_bytes / std::max<int64_t>(1, bytes_per_token));
}

at::Tensor tiled_token_call(const TokenFunction& function, const at::Tensor& x, int64_t tile_tokens,
                            const std::vector<at::Tensor>& parameters, bool preserve_rng_state) {
  bool tracked = x.requires_grad();
  for (const auto& parameter : parameters) tracked = tracked || parameter.requires_grad();
  if (!at::GradMode::is_enabled() || !tracked) return run_tiles(function, x, tile_tokens, nullptr);
  return TiledTokenCall::apply(x, at::TensorList(parameters), TileSpec{function, tile_tokens, preserve_rng_state});
}

}  // namespace finetune
