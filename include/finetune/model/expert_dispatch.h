// How a sparse layer's tokens reach their experts and come back (Note [Gathered expert dispatch]):
// the permutation from token order (token n's j-th choice, assignment n*k + j) to the rows sorted
// by expert, the dispatch x -> rows and the weighted combine rows -> tokens, each one autograd
// node whose forward and backward are gathers.
//
// Note [Gathered expert dispatch]
// Assignments are sorted by expert (stable argsort of the (N*k) expert ids): sorted row i holds
// assignment order[i], of token tokens[i] = order[i] / k, and assignment n*k + j sits in sorted row
// inverse[n*k + j] (inverse[order[i]] = i). Since every token owns exactly k sorted rows, both
// directions are gathers, never an index_add (whose CUDA kernel adds with atomics, in an order that
// changes from launch to launch, rounding to bf16 after every add):
//   dispatch  rows[i] = x[tokens[i]]                          backward  dx[n] = sum_j drows[inverse[n*k+j]]
//   combine   out[n] = sum_j w[n,j] outputs[inverse[n*k+j]]   backward  doutputs[i] = w[order[i]] dout[tokens[i]]
//                                                                       dw[order[i]] = <dout[tokens[i]], outputs[i]>
// Each sum over the k choices (and over the C features for dw) accumulates in fp32 (fp64 for fp64
// tensors) and rounds to the dtype once. transformers rounds each weighted expert output to the
// model dtype and adds them in the model dtype one expert at a time (index_add_ in its loop over
// experts); in fp32 the two differ only in the order of the k additions, in bf16 ours is the more
// accurate sum. doutputs is one product rounded once, as autograd computes it for transformers.
// The weights' gradient is written to its assignment's slot, order[i]: a permutation, no atomics.
//
// Kernels: with `fused` (KernelPolicy::fused_elementwise: a CUDA device in bf16/fp16) the combine,
// its backward and the dispatch's backward are one CUDA kernel each (model/cuda/
// expert_dispatch_kernels.cu); otherwise the same sums as ATen gathers and reductions (the CPU,
// fp32). Neither reads anything back to the host or sizes a tensor from device values, so a CUDA
// graph can capture them (Note [Graphed expert routing] in moe_block.h).
#pragma once

#include <cstdint>
#include <utility>

#include <ATen/ATen.h>

namespace finetune {

// The permutation between token order and expert order (Note [Gathered expert dispatch]).
struct ExpertDispatch {
  int64_t top_k = 1;
  at::Tensor order;    // (N*k) int64: the assignment n*k + j in sorted row i
  at::Tensor tokens;   // (N*k) int64: sorted row i's token, order[i] / k
  at::Tensor inverse;  // (N*k) int64: assignment n*k + j's sorted row

  int64_t num_tokens() const { return inverse.numel() / top_k; }
};

// experts (N, k) int64 -> the stable sort of the assignments by expert and its inverse.
ExpertDispatch plan_expert_dispatch(const at::Tensor& experts);

// x (N, C) -> rows (N*k, C) sorted by expert: rows[i] = x[tokens[i]]. Differentiable in x; the
// backward sums each token's k row gradients (fp32 accumulation, rounded once).
at::Tensor dispatch_rows(const at::Tensor& x, const ExpertDispatch& dispatch, bool fused);

// outputs (N*k, C) sorted by expert, weights (N, k) in token order (fp32 or outputs' dtype) ->
// out (N, C) in outputs' dtype: out[n] = sum_j weights[n, j] * outputs[inverse[n*k + j]], summed in
// fp32 and rounded once. Differentiable in outputs and weights.
at::Tensor combine_rows(const at::Tensor& outputs, const at::Tensor& weights, const ExpertDispatch& dispatch,
                        bool fused);

// The fused CUDA kernels behind the two nodes (model/cuda/expert_dispatch_fused.cpp); builds
// without CUDA kernels throw if called. Tensors on one CUDA device, bf16/fp16 rows, weights fp32
// or the rows' dtype, int64 indices.
//
// src (R, C), index (rows*k), weights (rows*k) or undefined for all ones -> (rows, C):
// out[r] = sum_{j<k} weights[r*k + j] * src[index[r*k + j]].
at::Tensor fused_gathered_row_sum(const at::Tensor& src, const at::Tensor& index, const at::Tensor& weights,
                                  int64_t rows, int64_t top_k);
// The combine's backward: grad (N, C), outputs (N*k, C), weights (N, k) -> (doutputs (N*k, C),
// dweights (N, k)); either is skipped (undefined) when its flag is false.
std::pair<at::Tensor, at::Tensor> fused_combine_backward(const at::Tensor& grad, const at::Tensor& outputs,
                                                         const at::Tensor& weights, const ExpertDispatch& dispatch,
                                                         bool outputs_grad, bool weights_grad);

}  // namespace finetune
