// A per-token function run over the sequence in tiles (Note [Sequence-tiled MLP]): the MLP of a
// long row never holds its (tokens x intermediate) activations for every token at once, in the
// forward pass or, under autograd, for the backward pass.
#pragma once

#include <functional>
#include <vector>

#include <ATen/ATen.h>

namespace finetune {

// The MLP's intermediates of one tile stay within this budget: 1 GiB is 14,563 tokens of an
// 8B model's bf16 gate, up and activation (3 x 12,288 x 2 bytes a token), so rows up to ~14k
// tokens keep today's untiled path and its speed.
constexpr int64_t kMlpTileBytes = int64_t{1} << 30;

// Tokens per tile: budget_bytes / (3 x intermediate_size x the dtype's size), at least 1.
int64_t mlp_tile_tokens(int64_t intermediate_size, at::ScalarType dtype, int64_t budget_bytes);

// A function of each token on its own: rows (n, C_in) -> (n, C_out).
using TokenFunction = std::function<at::Tensor(const at::Tensor&)>;

// function(x) for x (N, C_in), computed tile_tokens rows at a time -> (N, C_out). Under autograd
// it is one node that keeps only x: its backward recomputes each tile and back-propagates through
// it, returning x's gradient and the summed gradients of `parameters` (the tensors the function
// trains, each accumulated into .grad once, as an untiled backward does; Note [Sequence-tiled MLP]).
// With preserve_rng_state each tile's recompute replays the random numbers of its first run.
at::Tensor tiled_token_call(const TokenFunction& function, const at::Tensor& x, int64_t tile_tokens,
                            const std::vector<at::Tensor>& parameters, bool preserve_rng_state);

}  // namespace finetune
