// Row encodings of llama.cpp's quantizer without an importance matrix, ported line for line from
// ggml/src/ggml-quants.c (float operations in the same order, so the bytes are the same):
//   Q4_0 quantize_row_q4_0_ref  - blocks of 32: fp16 d = max/-8, 4-bit (int8)(x/d + 8.5);
//   Q5_0 quantize_row_q5_0_ref  - blocks of 32: fp16 d = max/-16, 5-bit, high bits in qh;
//   Q5_1 quantize_row_q5_1_ref  - blocks of 32: fp16 d = (max-min)/31 and min, 5-bit;
//   Q4_K quantize_row_q4_K_ref  - super-blocks of 256: 8 sub-blocks of 32 with 6-bit scales and
//        mins from make_qkx2_quants, 4-bit quants;
//   Q5_K quantize_row_q5_K_ref  - the same with 5-bit quants;
//   Q6_K quantize_row_q6_K_ref  - super-blocks of 256: 16 sub-blocks of 16 with int8 scales from
//        make_qx_quants, 6-bit quants.
// `count` floats (a multiple of the block size) -> the blocks appended to `out`.
#pragma once

#include <cstdint>
#include <string>

namespace finetune {

void encode_q4_0(const float* x, int64_t count, std::string& out);
void encode_q5_0(const float* x, int64_t count, std::string& out);
void encode_q5_1(const float* x, int64_t count, std::string& out);
void encode_q4_k(const float* x, int64_t count, std::string& out);
void encode_q5_k(const float* x, int64_t count, std::string& out);
void encode_q6_k(const float* x, int64_t count, std::string& out);

}  // namespace finetune
