#include "finetune/gguf/gguf_quantize.h"

#include <c10/util/Half.h>

#include <cmath>
#include <cstring>

#include "finetune/gguf/gguf_quant_blocks.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// gguf-py's np_roundf: |x| rounded half away from zero, computed as floor(a) + floor(2 (a - floor a)).
float round_half_away(float value) {
  const float a = std::fabs(value);
  const float floored = std::floor(a);
  const float rounded = floored + std::floor(2.0f * (a - floored));
  return value > 0 ? rounded : (value < 0 ? -rounded : 0.0f);
}

void encode_q8_0_block(const float* x, std::string& out) {
  float amax = 0.0f;
  for (int64_t i = 0; i < kQ8_0BlockSize; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  put<uint16_t>(out, fp32_to_fp16_bits(d));
  for (int64_t i = 0; i < kQ8_0BlockSize; ++i) {
    put<int8_t>(out, static_cast<int8_t>(round_half_away(x[i] * id)));
  }
}

}  // namespace

GgmlType ggml_type_from_name(const std::string& name) {
  if (name == "f32") return GgmlType::kF32;
  if (name == "f16") return GgmlType::kF16;
  if (name == "bf16") return GgmlType::kBF16;
  if (name == "q8_0") return GgmlType::kQ8_0;
  throw UsageError("--quantization: '" + name +
                   "' is not a GGUF type this export writes (f32, f16, bf16, q8_0, q4_0, q5_0, q6_k, q4_k_m, q5_k_m)");
}

std::string ggml_type_name(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kBF16: return "BF16";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kQ4_0: return "Q4_0";
    case GgmlType::kQ5_0: return "Q5_0";
    case GgmlType::kQ5_1: return "Q5_1";
    case GgmlType::kQ4_K: return "Q4_K";
    case GgmlType::kQ5_K: return "Q5_K";
    case GgmlType::kQ6_K: return "Q6_K";
  }
  throw Error("unknown ggml type " + std::to_string(static_cast<uint32_t>(type)));
}

uint32_t llama_file_type(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kBF16: return 32;
    default: break;
  }
  throw Error("GGUF: no converter file type for " + ggml_type_name(type));
}

int64_t ggml_block_size(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0: return 32;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return 256;
    default: return 1;
  }
}

bool ggml_can_encode(GgmlType type, int64_t row_length) { return row_length % ggml_block_size(type) == 0; }

uint64_t ggml_row_bytes(GgmlType type, int64_t row_length) {
  if (!ggml_can_encode(type, row_length)) {
    throw Error("GGUF " + ggml_type_name(type) + ": rows of " + std::to_string(row_length) +
                " values are not a multiple of " + std::to_string(ggml_block_size(type)));
  }
  uint64_t block_bytes = 0;
  switch (type) {
    case GgmlType::kF32: block_bytes = 4; break;
    case GgmlType::kF16:
    case GgmlType::kBF16: block_bytes = 2; break;
    case GgmlType::kQ8_0: block_bytes = 34; break;
    case GgmlType::kQ4_0: block_bytes = 18; break;
    case GgmlType::kQ5_0: block_bytes = 22; break;
    case GgmlType::kQ5_1: block_bytes = 24; break;
    case GgmlType::kQ4_K: block_bytes = 144; break;
    case GgmlType::kQ5_K: block_bytes = 176; break;
    case GgmlType::kQ6_K: block_bytes = 210; break;
  }
  return static_cast<uint64_t>(row_length / ggml_block_size(type)) * block_bytes;
}

uint16_t fp32_to_fp16_bits(float value) { return c10::Half(value).x; }

uint16_t fp32_to_bf16_bits(float value) {
  uint32_t n = float_bits(value);
  if ((n & 0x7fffffffu) > 0x7f800000u) n = (n & 0xffff0000u) | (64u << 16);  // NaN stays a quiet NaN
  const uint64_t rounded = (uint64_t{n} + (0x7fffu + ((n >> 16) & 1u))) >> 16;
  return static_cast<uint16_t>(rounded);
}

std::string ggml_encode(const float* data, int64_t rows, int64_t row_length, GgmlType type) {
  if (!ggml_can_encode(type, row_length)) {
    throw Error("GGUF " + ggml_type_name(type) + ": rows of " + std::to_string(row_length) +
                " values are not a multiple of " + std::to_string(ggml_block_size(type)));
  }
  const int64_t count = rows * row_length;
  std::string out;
  switch (type) {
    case GgmlType::kF32:
      out.assign(reinterpret_cast<const char*>(data), static_cast<size_t>(count) * sizeof(float));
      break;
    case GgmlType::kF16:
      out.reserve(count * 2);
      for (int64_t i = 0; i < count; ++i) put<uint16_t>(out, fp32_to_fp16_bits(data[i]));
      break;
    case GgmlType::kBF16:
      out.reserve(count * 2);
      for (int64_t i = 0; i < count; ++i) put<uint16_t>(out, fp32_to_bf16_bits(data[i]));
      break;
    case GgmlType::kQ8_0:
      out.reserve(count / kQ8_0BlockSize * 34);
      for (int64_t i = 0; i < count; i += kQ8_0BlockSize) encode_q8_0_block(data + i, out);
      break;
    case GgmlType::kQ4_0: encode_q4_0(data, count, out); break;
    case GgmlType::kQ5_0: encode_q5_0(data, count, out); break;
    case GgmlType::kQ5_1: encode_q5_1(data, count, out); break;
    case GgmlType::kQ4_K: encode_q4_k(data, count, out); break;
    case GgmlType::kQ5_K: encode_q5_k(data, count, out); break;
    case GgmlType::kQ6_K: encode_q6_k(data, count, out); break;
  }
  return out;
}

}  // namespace finetune
