// Tensor data in the ggml types the GGUF export writes, byte for byte as llama.cpp's gguf-py
// (gguf/quants.py, which its converter uses) encodes a float32 array:
//   F32  - the floats;
//   F16  - IEEE half, round to nearest even (numpy astype(float16));
//   BF16 - ggml_compute_fp32_to_bf16: round to nearest even on the high 16 bits, NaN kept quiet;
//   Q8_0 - per row, blocks of 32: fp16 scale d = amax / 127 then 32 int8 round-half-away(x / d)
//          (gguf-py's bit-exact copy of ggml-quants.c's quantize_row_q8_0_ref);
//   Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K - llama.cpp's quantizer's (gguf_quant_blocks.h).
// Rows are the innermost (last, PyTorch order) dimension; a quantized type needs it a multiple of
// its block (32, or 256 for the K types).
#pragma once

#include <cstdint>
#include <string>

namespace finetune {

// ggml_type ids (gguf-py GGMLQuantizationType).
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30
};

inline constexpr int64_t kQ8_0BlockSize = 32;

// "f32" | "f16" | "bf16" | "q8_0" (the types the converter writes itself) -> type; UsageError
// otherwise (the quantizer's mixes are gguf_quant_mix.h's).
GgmlType ggml_type_from_name(const std::string& name);
std::string ggml_type_name(GgmlType type);  // "F32", "F16", "BF16", "Q8_0", "Q4_K"... as llama.cpp prints them

// general.file_type of a converter file (LlamaFileType: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7,
// MOSTLY_BF16 32); Error for the other types.
uint32_t llama_file_type(GgmlType type);

// Values per block: 32 (Q4_0, Q5_0, Q5_1, Q8_0), 256 (Q4_K, Q5_K, Q6_K), 1 (F32, F16, BF16).
int64_t ggml_block_size(GgmlType type);

// Whether rows of `row_length` values can be stored as `type` (a multiple of its block).
bool ggml_can_encode(GgmlType type, int64_t row_length);

// Bytes of one row of `row_length` values in `type` (ggml_row_size): blocks times the block's
// bytes (F32 4, F16/BF16 2, Q8_0 34, Q4_0 18, Q5_0 22, Q5_1 24, Q4_K 144, Q5_K 176, Q6_K 210).
// Error when the row length does not fit the type.
uint64_t ggml_row_bytes(GgmlType type, int64_t row_length);

uint16_t fp32_to_fp16_bits(float value);
uint16_t fp32_to_bf16_bits(float value);

// `rows` x `row_length` contiguous floats -> the type's bytes. Throws Error when the row length
// does not fit the type.
std::string ggml_encode(const float* data, int64_t rows, int64_t row_length, GgmlType type);

}  // namespace finetune
