// 4-bit NormalFloat (NF4) base weights exactly as bitsandbytes 0.50.2 makes them for QLoRA: what
// `AutoModelForCausalLM.from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True,
// bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True))` holds in each Linear4bit
// (bitsandbytes.nn.Params4bit: packed codes + QuantState). transformers quantizes each weight with
// bitsandbytes.functional.quantize_4bit(w, blocksize=64, compress_statistics=use_double_quant,
// quant_type, quant_storage=uint8) on the device it loads the weight to; so do we, and bitsandbytes'
// CPU and CUDA kernels differ in a few cases (Note [bitsandbytes' CPU and CUDA 4-bit quantizers],
// nf4.cpp): on a CPU tensor we compute what its CPU path does, on a CUDA tensor what its CUDA kernels do.
// FP4 (quant_type "fp4") is supported the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace finetune {

enum class QuantType4bit { NF4, FP4 };

// "nf4" / "fp4", bitsandbytes' quant_type names.
const char* quant_type_name(QuantType4bit type);
// The inverse; throws Error naming `context` and the accepted names for anything else.
QuantType4bit parse_quant_type(const std::string& name, const std::string& context);

// bitsandbytes' 4-bit block sizes are 32, 64, ..., 4096; throws Error naming `context` for any other.
void check_blocksize_4bit(int64_t blocksize, const std::string& context);

// The 16 fp32 values a 4-bit code stands for (bitsandbytes.functional.get_4bit_type), on the CPU.
at::Tensor quant_map_4bit(QuantType4bit type);

// One quantized weight: bitsandbytes' Params4bit data plus its QuantState. All tensors live on one device.
struct Nf4Weight {
  at::Tensor packed;            // uint8 ((numel + 1) / 2, 1): two codes a byte, the earlier element in the high nibble
  at::Tensor absmax;            // per block of `blocksize` elements: uint8 codes (blocks,) when nested, else fp32 (blocks,)
  at::Tensor quant_map;         // fp32 (16,): quant_map_4bit(quant_type)
  bool nested = false;          // double quantization (bnb_4bit_use_double_quant / compress_statistics)
  at::Tensor nested_absmax;     // fp32 (ceil(blocks / nested_blocksize),), when nested
  at::Tensor nested_quant_map;  // fp32 (256,): dynamic_map(true), when nested
  at::Tensor offset;            // fp32 0-dim: mean of the fp32 absmax, subtracted before nesting, when nested
  int64_t blocksize = 64;
  int64_t nested_blocksize = 256;
  QuantType4bit quant_type = QuantType4bit::NF4;
  std::vector<int64_t> shape;   // the original weight's, (out, in) for a linear layer
  at::ScalarType dtype = at::kBFloat16;  // the original weight's (QuantState.dtype)

  int64_t numel() const;
  int64_t blocks() const { return (numel() + blocksize - 1) / blocksize; }
  at::Device device() const { return packed.device(); }
  // A copy with every tensor on `device` (the same tensors when already there).
  Nf4Weight to(at::Device device) const;
};

// bitsandbytes.functional.quantize_4bit(weight, blocksize=blocksize, compress_statistics=...,
// quant_type=..., quant_storage=torch.uint8) on weight's device, byte for byte: packed codes and
// every statistic (absmax, offset, nested absmax and codes, maps). weight: fp32/bf16/fp16, any
// shape, CPU or CUDA; blocksize one of bitsandbytes' 32, 64, ..., 4096.
Nf4Weight quantize_nf4(const at::Tensor& weight, bool compress_statistics = true, int64_t blocksize = 64,
                       QuantType4bit quant_type = QuantType4bit::NF4);

// bitsandbytes.functional.dequantize_4bit(packed, quant_state).to(dtype), bit for bit (what
// Linear4bit's matmul_4bit multiplies by): the absmax rebuilt as bitsandbytes does
// (nested_quant_map[absmax] * nested_absmax[block] + offset, in fp32), each value
// quant_map[code] * absmax computed in fp32 and rounded to the weight's dtype, then to `dtype`
// (bf16/fp16/fp32). Like bitsandbytes, the codes decode with the fixed table of quant_type, not
// with w.quant_map (the copy a checkpoint carries): quant_map_4bit, except that FP4's code 8 is
// -0.0 where bitsandbytes' native kernels decode it (CUDA; CPU unless its torch fallback runs).
// Result: w.shape, on w's device (bitsandbytes returns (1, n) for a 1-D weight).
at::Tensor dequantize_nf4(const Nf4Weight& w, at::ScalarType dtype);

// The same into a caller's buffer (reused across layers): out contiguous, w.shape, bf16/fp16/fp32,
// on w's device.
void dequantize_nf4_into(const Nf4Weight& w, at::Tensor& out);

// dequantize_nf4_into(*weights[i], outs[i]) for every i, bit for bit. On CUDA, weights of one
// device, quant_type and dtype into outputs of one dtype dequantize in one kernel launch (per 256
// weights: an expert stack's pieces, quant/nf4_stack.h); otherwise one call each.
void dequantize_nf4_batch_into(const std::vector<const Nf4Weight*>& weights, std::vector<at::Tensor>& outs);

}  // namespace finetune
