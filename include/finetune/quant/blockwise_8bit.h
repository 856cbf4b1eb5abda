// bitsandbytes' blockwise 8-bit quantization (bitsandbytes.functional.quantize_blockwise /
// dequantize_blockwise, version 0.50.2), byte for byte as its CPU kernel computes it: each block of
// `blocksize` consecutive elements (of the flattened tensor; the last block may be shorter) is
// scaled by 1 / max |x| and every scaled value is replaced by the index of a nearby entry of a
// 256-entry code. Used for 8-bit optimizer state and for the nested (double-quantized) NF4 absmax.
// Note [bitsandbytes' CPU 8-bit quantizer] (blockwise_8bit.cpp) says exactly what is computed.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace finetune {

// bitsandbytes.functional.create_dynamic_map(signed=is_signed) with its defaults
// (max_exponent_bits=7, total_bits=8): 256 fp32 values on the CPU, sorted ascending.
at::Tensor dynamic_map(bool is_signed);

struct BlockwiseQuantized {
  at::Tensor codes;   // uint8, the input's shape
  at::Tensor absmax;  // fp32 (ceil(numel / blocksize))
};

// bitsandbytes' quantize_blockwise(A, code, blocksize) as its CPU kernel computes it
// (torch.ops.bitsandbytes.quantize_blockwise on CPU: the native cquantize_blockwise_cpu_{fp32,bf16,fp16}),
// byte-identical; A fp32/bf16/fp16 on any device (result on A's device; CUDA tensors run a kernel
// with the same arithmetic). `code` holds 256 fp32 values sorted ascending (dynamic_map is), on any device.
BlockwiseQuantized quantize_blockwise(const at::Tensor& A, const at::Tensor& code, int64_t blocksize);

// The same into existing tensors (an optimizer re-quantizes its state in place): codes uint8 with
// A's numel, absmax fp32 (ceil(numel / blocksize)), both contiguous on A's device.
void quantize_blockwise_into(const at::Tensor& A, const at::Tensor& code, int64_t blocksize, at::Tensor& codes,
                             at::Tensor& absmax);

// bitsandbytes' dequantize_blockwise: code[codes] * absmax[block], computed in fp32, returned in
// `dtype` (rounded to nearest even), with codes' shape and device.
at::Tensor dequantize_blockwise(const at::Tensor& codes, const at::Tensor& absmax, const at::Tensor& code,
                                int64_t blocksize, at::ScalarType dtype);

}  // namespace finetune
