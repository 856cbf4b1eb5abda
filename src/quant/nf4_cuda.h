// CUDA entry points of nf4.cpp on ATen tensors (cuda/nf4_launch.cpp, CUDA builds only; callers
// guard with FINETUNE_WITH_CUDA). Internal to src/quant/.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/quant/nf4.h"

namespace finetune::quant_cuda {

// bitsandbytes' CUDA quantize_4bit (kQuantizeBlockwise / kQuantizeBlockwiseSmall with the NF4 or
// FP4 decision tree): A contiguous CUDA -> packed uint8 ((numel + 1) / 2, 1), absmax fp32 (blocks,).
void quantize_4bit(const at::Tensor& A, int64_t blocksize, QuantType4bit type, at::Tensor& packed,
                   at::Tensor& absmax);

// dequantize_nf4_into's CUDA kernel: the absmax rebuilt inline from w's statistics (contiguous on
// w's device); table: the 16 values the codes stand for.
void dequantize_4bit(const Nf4Weight& w, const at::Tensor& table, at::Tensor& out);

// dequantize_4bit of weights[i] into outs[i] (each checked as dequantize_nf4_into checks it) in one
// kernel launch (cuda_kernels::dequantize_4bit_pieces): the weights share one device, dtype and
// decode table, and the outs one dtype.
void dequantize_4bit_batch(const std::vector<const Nf4Weight*>& weights, const at::Tensor& table,
                           std::vector<at::Tensor>& outs);

}  // namespace finetune::quant_cuda
