// A 3-D stack of expert weights (E, out, in) held in NF4 as bitsandbytes quantizes them when each
// expert's projection is its own nn.Linear (transformers 4.x's Mixtral w1/w3/w2 and Qwen3-MoE
// gate_proj/up_proj/down_proj modules, and the hub's *-bnb-4bit MoE checkpoints): one
// quantize_4bit call (one Params4bit + QuantState, nf4.h) per checkpoint tensor, i.e. per expert
// and projection, never over the fused stack (Note [Expert tensors] in model/architecture.h: a
// stack's rows come from several checkpoint tensors; the blocks and the double quantization's
// offset are per tensor).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/quant/nf4.h"

namespace finetune {

// One checkpoint tensor of the stack: rows [row_begin, row_begin + weight.shape[0]) of expert
// `expert`, quantized on its own (weight.shape (rows, in)).
struct Nf4StackPiece {
  int64_t expert = 0;
  int64_t row_begin = 0;
  Nf4Weight weight;
};

struct Nf4Stack {
  std::vector<int64_t> shape;            // (E, out, in)
  at::ScalarType dtype = at::kBFloat16;  // the 16-bit stack's (the pieces' QuantState.dtype)
  std::vector<Nf4StackPiece> pieces;     // covering every row of every expert once

  at::Device device() const;
  // The bytes the pieces hold on their device (codes and statistics).
  int64_t storage_bytes() const;
};

// Throws Error naming `context` unless the pieces are 2-D, on one device, of `shape`'s width, and
// cover each expert's rows exactly once.
void check_nf4_stack(const Nf4Stack& stack, const std::string& context);

// Every piece dequantized (dequantize_nf4_into, bit for bit bitsandbytes' dequantize_4bit) into
// its rows of `out`: contiguous (E, out, in), bf16/fp16/fp32, on the stack's device. On CUDA one
// kernel launch for the whole stack (dequantize_nf4_batch_into: per 256 pieces) on the current
// stream, no host sync.
void dequantize_nf4_stack_into(const Nf4Stack& stack, at::Tensor& out);

// The same into a fresh tensor of `dtype`.
at::Tensor dequantize_nf4_stack(const Nf4Stack& stack, at::ScalarType dtype);

}  // namespace finetune
