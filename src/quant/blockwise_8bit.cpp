#include "finetune/quant/blockwise_8bit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "finetune/util/errors.h"
#include "blockwise_8bit_cuda.h"

namespace finetune {

// Note [bitsandbytes' CPU 8-bit quantizer]
// bitsandbytes 0.50.2's cquantize_blockwise_cpu_{fp32,bf16,fp16} (csrc/cpu_ops.cpp, as compiled in
// its x86-64 wheel; checked against its disassembly) does not search the code for the nearest
// value. It builds a 65536-entry table once per code: grid point g (0..65535) stands for the fp32
// value v_g = (2.0f * g) / 65535.0f - 1.0f, and table[g] = the number of midpoints
// m_i = 0.5f * (code[i] + code[i + 1]) that are < v_g (so a grid point on a midpoint takes the
// lower code). An element x of a block is then, in fp32:
//   absmax = max(0, max |x| over the block's non-NaN elements)   (a NaN never wins std::max)
//   absmax == 0: every code of the block is 0 (code[0], not the code of 0.0)
//   s = x * (1.0f / absmax)                                         (a reciprocal, then a multiply)
//   c = clamp(s, -1, 1)                                             (NaN stays NaN)
//   g = (uint16) trunc(fmaf((c + 1.0f) * 0.5f, 65535.0f, 0.5f))    (the compiler fused this FMA;
//       a NaN converts to 0x80000000, whose low 16 bits are 0)
//   code index = table[g]
// So values closer together than the grid (2 / 65535 of the block's absmax) share a code even where
// the code is finer (the dynamic map's entries near 0), and a value near a midpoint may take the
// farther code: the result is what bitsandbytes stores, not the nearest code. The blocks are
// independent, and the last one simply has fewer elements. Its CUDA kernel (Rule8bit::CudaSearch)
// differs; quantize_blockwise promises the CPU result on every device, and the CUDA kernel in
// cuda/blockwise_8bit_kernels.cu computes this same arithmetic (with the table's entry found by a
// binary search over the midpoints instead of a stored table, equal since the code is sorted).

namespace {

constexpr int64_t kCodeSize = 256;
constexpr int kGridSize = 65536;

// create_dynamic_map's Python, op for op (linspace and the products are fp32 ATen ops there too).
std::vector<float> dynamic_map_values(bool is_signed) {
  constexpr int kMaxExponentBits = 7;
  constexpr int kNonSignBits = 7;  // total_bits - 1
  std::vector<float> data;
  for (int i = 0; i < kMaxExponentBits; ++i) {
    const int64_t fraction_items = is_signed ? (int64_t{1} << (i + kNonSignBits - kMaxExponentBits)) + 1
                                             : (int64_t{1} << (i + kNonSignBits - kMaxExponentBits + 1)) + 1;
    const auto boundaries = at::linspace(0.1, 1.0, fraction_items, at::TensorOptions().dtype(at::kFloat));
    const auto means = (boundaries.narrow(0, 0, fraction_items - 1) + boundaries.narrow(0, 1, fraction_items - 1)) / 2.0;
    // Python's 10 ** (-(max_exponent_bits - 1) + i): a float (C pow) below 10**0, the int 1 at it.
    const double scale = std::pow(10.0, static_cast<double>(-(kMaxExponentBits - 1) + i));
    for (const double sign : is_signed ? std::vector<double>{1.0, -1.0} : std::vector<double>{1.0}) {
      const auto values = (means * (sign * scale)).contiguous();
      data.insert(data.end(), values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
    }
  }
  // additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1 = 0 with the defaults.
  data.push_back(0.0f);
  data.push_back(1.0f);
  data.resize(kCodeSize, 0.0f);  // create_dynamic_map pads with zeros (none with the defaults)
  std::sort(data.begin(), data.end());
  return data;
}

void check_input(const at::Tensor& A, const at::Tensor& code, int64_t blocksize, const char* function) {
  const auto type = A.scalar_type();
  if (type != at::kFloat && type != at::kBFloat16 && type != at::kHalf) {
    throw Error(std::string(function) + ": A must be fp32, bf16 or fp16, got " + std::string(c10::toString(type)));
  }
  if (code.scalar_type() != at::kFloat || code.numel() != kCodeSize) {
    throw Error(std::string(function) + ": code must hold 256 fp32 values, got " + code.toString() + " " +
                std::to_string(code.numel()));
  }
  if (blocksize <= 0) throw Error(std::string(function) + ": blocksize must be positive, got " + std::to_string(blocksize));
}

// table[g]: Note [bitsandbytes' CPU 8-bit quantizer].
std::array<uint8_t, kGridSize> nearest_code_table(const float* code) {
  std::array<float, kCodeSize - 1> midpoints;
  for (int64_t i = 0; i + 1 < kCodeSize; ++i) midpoints[i] = 0.5f * (code[i] + code[i + 1]);
  std::array<uint8_t, kGridSize> table;
  int index = 0;
  for (int g = 0; g < kGridSize; ++g) {
    const float value = (2.0f * static_cast<float>(g)) / static_cast<float>(kGridSize - 1) - 1.0f;
    while (index < kCodeSize - 1 && midpoints[index] < value) ++index;
    table[g] = static_cast<uint8_t>(index);
  }
  return table;
}

// The grid point of a scaled value s = x / absmax.
inline int grid_index(float scaled) {
  const float c = scaled < -1.0f ? -1.0f : (1.0f < scaled ? 1.0f : scaled);  // std::clamp: NaN passes
  const float g = std::fma((c + 1.0f) * 0.5f, static_cast<float>(kGridSize - 1), 0.5f);
  if (std::isnan(g)) return 0;
  return static_cast<int>(g);  // in [0, 65535]: c is within [-1, 1]
}

template <typename T>
void quantize_cpu(const T* A, const uint8_t* table, int64_t n, int64_t blocksize, uint8_t* codes, float* absmax) {
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t start = b * blocksize;
      const int64_t stop = std::min(start + blocksize, n);
      float largest = -std::numeric_limits<float>::infinity();
      for (int64_t i = start; i < stop; ++i) {
        const float magnitude = std::fabs(static_cast<float>(A[i]));
        largest = largest < magnitude ? magnitude : largest;  // std::max: a NaN never wins
      }
      const float scale = 0.0f > largest ? 0.0f : largest;
      absmax[b] = scale;
      if (scale == 0.0f) {
        std::fill(codes + start, codes + stop, uint8_t{0});
        continue;
      }
      const float inverse = 1.0f / scale;
      for (int64_t i = start; i < stop; ++i) codes[i] = table[grid_index(static_cast<float>(A[i]) * inverse)];
    }
  });
}

void check_outputs(const at::Tensor& A, int64_t blocksize, const at::Tensor& codes, const at::Tensor& absmax) {
  const int64_t blocks = (A.numel() + blocksize - 1) / blocksize;
  if (codes.scalar_type() != at::kByte || codes.numel() != A.numel() || !codes.is_contiguous() ||
      codes.device() != A.device()) {
    throw Error("quantize_blockwise_into: codes must be contiguous uint8 with A's " + std::to_string(A.numel()) +
                " elements on " + A.device().str() + ", got " + codes.toString() + " " + std::to_string(codes.numel()));
  }
  if (absmax.scalar_type() != at::kFloat || absmax.numel() != blocks || !absmax.is_contiguous() ||
      absmax.device() != A.device()) {
    throw Error("quantize_blockwise_into: absmax must be contiguous fp32 with " + std::to_string(blocks) +
                " elements on " + A.device().str() + ", got " + absmax.toString() + " " +
                std::to_string(absmax.numel()));
  }
}

}  // namespace

at::Tensor dynamic_map(bool is_signed) {
  auto values = dynamic_map_values(is_signed);
  return at::tensor(values, at::TensorOptions().dtype(at::kFloat));
}

void quantize_blockwise_into(const at::Tensor& A, const at::Tensor& code, int64_t blocksize, at::Tensor& codes,
                             at::Tensor& absmax) {
  check_input(A, code, blocksize, "quantize_blockwise");
  check_outputs(A, blocksize, codes, absmax);
  const auto input = A.contiguous();
  if (input.is_cuda()) {
#ifdef FINETUNE_WITH_CUDA
    quant_cuda::quantize_blockwise(input, code.to(input.device(), at::kFloat).contiguous(), blocksize,
                                   quant_cuda::Rule8bit::CpuTable, codes, absmax);
    return;
#else
    throw Error("quantize_blockwise: this build has no CUDA kernels");
#endif
  }
  if (!input.is_cpu()) throw Error("quantize_blockwise: A must be on the CPU or a CUDA device, got " + A.device().str());
  const auto cpu_code = code.to(at::kCPU).contiguous();
  const auto table = nearest_code_table(cpu_code.data_ptr<float>());
  auto* out = codes.data_ptr<uint8_t>();
  auto* scales = absmax.data_ptr<float>();
  switch (input.scalar_type()) {
    case at::kFloat:
      quantize_cpu(input.data_ptr<float>(), table.data(), input.numel(), blocksize, out, scales);
      break;
    case at::kBFloat16:
      quantize_cpu(input.data_ptr<at::BFloat16>(), table.data(), input.numel(), blocksize, out, scales);
      break;
    default:
      quantize_cpu(input.data_ptr<at::Half>(), table.data(), input.numel(), blocksize, out, scales);
      break;
  }
}

BlockwiseQuantized quantize_blockwise(const at::Tensor& A, const at::Tensor& code, int64_t blocksize) {
  check_input(A, code, blocksize, "quantize_blockwise");
  const int64_t blocks = (A.numel() + blocksize - 1) / blocksize;
  BlockwiseQuantized result{at::empty(A.sizes(), A.options().dtype(at::kByte)),
                            at::empty({blocks}, A.options().dtype(at::kFloat))};
  quantize_blockwise_into(A, code, blocksize, result.codes, result.absmax);
  return result;
}

at::Tensor dequantize_blockwise(const at::Tensor& codes, const at::Tensor& absmax, const at::Tensor& code,
                                int64_t blocksize, at::ScalarType dtype) {
  if (codes.scalar_type() != at::kByte) throw Error("dequantize_blockwise: codes must be uint8, got " + codes.toString());
  if (blocksize <= 0) throw Error("dequantize_blockwise: blocksize must be positive, got " + std::to_string(blocksize));
  const int64_t n = codes.numel();
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  if (absmax.scalar_type() != at::kFloat || absmax.numel() != blocks) {
    throw Error("dequantize_blockwise: absmax must hold " + std::to_string(blocks) + " fp32 values, got " +
                absmax.toString() + " " + std::to_string(absmax.numel()));
  }
  if (code.scalar_type() != at::kFloat || code.numel() != kCodeSize) {
    throw Error("dequantize_blockwise: code must hold 256 fp32 values, got " + code.toString());
  }
  const auto values = code.to(codes.device()).index_select(0, codes.reshape(-1).to(at::kLong));  // (n,) fp32
  const auto scales = absmax.to(codes.device()).repeat_interleave(blocksize).narrow(0, 0, n);  // (n,)
  return (values * scales).to(dtype).view(codes.sizes());
}

}  // namespace finetune
