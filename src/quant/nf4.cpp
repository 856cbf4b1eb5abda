#include "finetune/quant/nf4.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include <ATen/Parallel.h>
#include <ATen/Version.h>

#include "finetune/quant/blockwise_8bit.h"
#include "finetune/util/errors.h"
#include "blockwise_8bit_cuda.h"
#include "nf4_cuda.h"

namespace finetune {

// Note [bitsandbytes' CPU and CUDA 4-bit quantizers]
// bitsandbytes 0.50.2 quantizes a CPU weight with the pure-torch quantize_4bit of
// backends/default/ops.py and a CUDA weight with csrc/kernels.cu (built with --use_fast_math).
// Both scale each block by its absmax and pick the code whose interval holds the scaled value,
// with the same 15 NF4 thresholds (bitsandbytes' dQuantizeNF4 constants are exactly the fp32
// midpoints (a + b) / 2 the CPU path bucketizes with, and a value on a threshold goes down in
// both). They differ here:
//   - the scale: CPU multiplies by 1 / absmax.clamp(min=1e-38) (correctly rounded) in full blocks
//     but divides by the clamped absmax in a short last block; CUDA multiplies by
//     rcp.approx.ftz(absmax), which can be 1 ulp off, so a value within an ulp of a threshold
//     can take the neighbouring code;
//   - a block of zeros: CPU codes 7 (0.0; absmax stored 0, or 1e-38 for a short last block),
//     CUDA codes 0 (0 * inf = NaN fails every comparison; absmax stored 0);
//   - subnormal inputs flush to zero on CUDA; a NaN poisons a CPU block (torch's max), CUDA ignores it;
//   - FP4: CUDA compares |x| with thresholds of its own (0.583333f, 0.8333333f are not midpoints)
//     and takes the sign from x < 0; CPU bucketizes with midpoints of the sorted FP4 table;
//   - the nested statistics: offset = absmax.mean() is torch's reduction on either device (the
//     same op on the same device gives the same bits), but quantize_blockwise(absmax - offset,
//     blocksize=256) is the CPU table quantizer (Note [bitsandbytes' CPU 8-bit quantizer],
//     blockwise_8bit.cpp) on CPU and kQuantizeBlockwise's binary search on CUDA; they disagree
//     on about one code in a thousand (71 of the 65536 of a random 1024 x 4096 bf16 weight).
// quantize_nf4 follows the weight's device: on CPU the default ops op for op in ATen (the same
// kernels as Python's torch), on CUDA our kernels with bitsandbytes' CUDA arithmetic
// (cuda/nf4_kernels.cu, cuda/blockwise_8bit_kernels.cu). So a model loaded to the GPU holds what
// transformers + bitsandbytes hold there, and one quantized on the CPU what they hold on the CPU.
// Dequantization is the same computation on both (table[code] * absmax in fp32), except that the
// CUDA multiply flushes subnormal products to zero as bitsandbytes' does.

namespace {

constexpr std::array<int64_t, 8> kBlocksizes4bit = {32, 64, 128, 256, 512, 1024, 2048, 4096};
constexpr int64_t kNestedBlocksize = 256;

void check_weight_dtype(at::ScalarType type, const std::string& context) {
  if (type != at::kFloat && type != at::kBFloat16 && type != at::kHalf) {
    throw Error(context + ": expected fp32, bf16 or fp16, got " + std::string(c10::toString(type)));
  }
}

// Whether bitsandbytes' CPU dequantize_4bit leaves its native kernel for the torch fallback
// (backends/cpu/ops.py): an odd last dimension, or blocksize >= 2048 on an AVX512 CPU.
bool cpu_uses_torch_fallback(const Nf4Weight& w) {
  return (!w.shape.empty() && w.shape.back() % 2 != 0) || (w.blocksize >= 2048 && at::get_cpu_capability() == "AVX512");
}

// The table bitsandbytes decodes with: quant_map, except that FP4's code 8 (sign bit, magnitude 0)
// decodes to -0.0 in its native CPU and CUDA kernels, where quant_map (and so its torch fallback)
// holds +0.0. NF4's kernel tables equal quant_map bit for bit.
at::Tensor decode_table(const Nf4Weight& w) {
  auto table = quant_map_4bit(w.quant_type);
  const bool fallback = w.device().is_cpu() && cpu_uses_torch_fallback(w);
  if (w.quant_type == QuantType4bit::FP4 && !fallback) table[8].fill_(-0.0);
  return table;
}

// backends/default/ops.py quantize_4bit (what bitsandbytes runs for a CPU tensor), op for op.
std::pair<at::Tensor, at::Tensor> quantize_4bit_cpu(const at::Tensor& weight, int64_t blocksize, QuantType4bit type) {
  const auto code = quant_map_4bit(type);
  const auto order = at::argsort(code);  // NF4: the identity; FP4: its two zeros in torch's order
  const auto sorted = code.index_select(0, order);
  const auto bounds = (sorted.narrow(0, 0, 15) + sorted.narrow(0, 1, 15)) / 2;  // (15,)
  const auto flat = weight.reshape(-1).to(at::kFloat);
  const int64_t n = flat.numel();
  const int64_t rem = n % blocksize;
  const int64_t full = n - rem;
  const auto blocks = flat.narrow(0, 0, full).reshape({full / blocksize, blocksize});
  auto absmax = std::get<0>(blocks.abs().max(-1));  // (full / blocksize,)
  // Python's 1.0 / t is t.reciprocal() * 1.0; the product by 1.0 changes nothing.
  const auto inverse = at::clamp(absmax, 1e-38, c10::nullopt).view({-1, 1}).reciprocal();
  auto scaled = at::clamp(blocks * inverse, -1, 1).reshape(-1);
  if (rem != 0) {
    const auto tail = flat.narrow(0, full, rem);
    const auto tail_absmax = at::clamp(tail.abs().max(), 1e-38, c10::nullopt);  // 0-dim
    absmax = at::cat({absmax, tail_absmax.unsqueeze(0)});
    scaled = at::cat({scaled, at::clamp(tail / tail_absmax, -1, 1)});
  }
  if (scaled.numel() % 2 != 0) scaled = at::constant_pad_nd(scaled, {0, 1}, 0);
  auto q = at::bucketize(scaled, bounds, /*out_int32=*/true, /*right=*/false);
  if (type != QuantType4bit::NF4) q = order.index({q});
  const auto q8 = q.to(at::kByte);
  const int64_t padded = q8.numel();
  const auto packed = at::bitwise_or(at::bitwise_left_shift(q8.slice(0, 0, padded, 2), 4), q8.slice(0, 1, padded, 2));
  return {packed.unsqueeze(1), absmax};  // ((n + 1) / 2, 1), (blocks,)
}

// bitsandbytes' CPU float_to_bf16: round to nearest even by adding to the bits (a NaN keeps its
// sign and high payload, as torch's conversion does not).
inline at::BFloat16 bnb_cpu_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return at::BFloat16(static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16), at::BFloat16::from_bits());
}

inline float bnb_cpu_round(float v, float*) { return v; }
inline at::BFloat16 bnb_cpu_round(float v, at::BFloat16*) { return bnb_cpu_bf16(v); }
inline at::Half bnb_cpu_round(float v, at::Half*) { return at::Half(v); }

// bitsandbytes' CPU dequantize_4bit into the weight's dtype: table[code] * absmax in IEEE fp32,
// rounded to nearest even.
template <typename Weight>
void dequantize_cpu(const Nf4Weight& w, const at::Tensor& absmax, const at::Tensor& table, Weight* out) {
  const auto* packed = w.packed.data_ptr<uint8_t>();
  const auto* scales = absmax.data_ptr<float>();
  const auto* values = table.data_ptr<float>();
  const int64_t n = w.numel();
  const int64_t blocksize = w.blocksize;
  at::parallel_for(0, (n + 1) / 2, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const uint8_t byte = packed[k];
      const float scale = scales[2 * k / blocksize];
      out[2 * k] = bnb_cpu_round(values[byte >> 4] * scale, out);
      if (2 * k + 1 < n) out[2 * k + 1] = bnb_cpu_round(values[byte & 0x0f] * scale, out);
    }
  });
}

// The statistics dequantization reads, on w's device: they must agree with each other.
void check_consistent(const Nf4Weight& w) {
  const auto device = w.device();
  const auto check = [&](const at::Tensor& t, at::ScalarType type, int64_t numel, const char* name) {
    if (!t.defined() || t.scalar_type() != type || t.numel() != numel || !t.is_contiguous() || t.device() != device) {
      throw Error(std::string("Nf4Weight.") + name + ": expected contiguous " + std::string(c10::toString(type)) +
                  " with " + std::to_string(numel) + " elements on " + device.str() +
                  (t.defined() ? ", got " + t.toString() + " with " + std::to_string(t.numel()) + " on " + t.device().str()
                               : ", got none"));
    }
  };
  check_blocksize_4bit(w.blocksize, "Nf4Weight.blocksize");
  check_weight_dtype(w.dtype, "Nf4Weight.dtype");
  check(w.packed, at::kByte, (w.numel() + 1) / 2, "packed");
  if (w.nested) {
    if (w.nested_blocksize <= 0) throw Error("Nf4Weight.nested_blocksize must be positive");
    check(w.absmax, at::kByte, w.blocks(), "absmax");
    check(w.nested_absmax, at::kFloat, (w.blocks() + w.nested_blocksize - 1) / w.nested_blocksize, "nested_absmax");
    check(w.nested_quant_map, at::kFloat, 256, "nested_quant_map");
    check(w.offset, at::kFloat, 1, "offset");
  } else {
    check(w.absmax, at::kFloat, w.blocks(), "absmax");
  }
}

}  // namespace

const char* quant_type_name(QuantType4bit type) { return type == QuantType4bit::NF4 ? "nf4" : "fp4"; }

QuantType4bit parse_quant_type(const std::string& name, const std::string& context) {
  for (const auto type : {QuantType4bit::NF4, QuantType4bit::FP4}) {
    if (name == quant_type_name(type)) return type;
  }
  throw Error(context + ": quant_type must be \"nf4\" or \"fp4\", got \"" + name + "\"");
}

void check_blocksize_4bit(int64_t blocksize, const std::string& context) {
  if (std::find(kBlocksizes4bit.begin(), kBlocksizes4bit.end(), blocksize) == kBlocksizes4bit.end()) {
    throw Error(context + ": blocksize must be one of bitsandbytes' 32, 64, 128, 256, 512, 1024, 2048, 4096, got " +
                std::to_string(blocksize));
  }
}

at::Tensor quant_map_4bit(QuantType4bit type) {
  // get_4bit_type's Python lists: torch.tensor rounds each to fp32, then divides by the largest |value|.
  static constexpr std::array<double, 16> kNf4 = {
      -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
      -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
      0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0};
  // Index 8 is Python's `-0`, the integer 0, so +0.0.
  static constexpr std::array<double, 16> kFp4 = {0.0,  0.0625,  8.0,   12.0, 4.0,  6.0,  2.0,  3.0,
                                                  0.0,  -0.0625, -8.0,  -12.0, -4.0, -6.0, -2.0, -3.0};
  const auto& values = type == QuantType4bit::NF4 ? kNf4 : kFp4;
  auto data = at::tensor(at::ArrayRef<double>(values.data(), values.size()), at::TensorOptions().dtype(at::kDouble))
                  .to(at::kFloat);
  data.div_(data.abs().max());
  return data;
}

int64_t Nf4Weight::numel() const {
  int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

Nf4Weight Nf4Weight::to(at::Device target) const {
  Nf4Weight moved = *this;
  for (auto* t : {&moved.packed, &moved.absmax, &moved.quant_map, &moved.nested_absmax, &moved.nested_quant_map,
                  &moved.offset}) {
    if (t->defined()) *t = t->to(target);
  }
  return moved;
}

Nf4Weight quantize_nf4(const at::Tensor& weight, bool compress_statistics, int64_t blocksize,
                       QuantType4bit quant_type) {
  check_weight_dtype(weight.scalar_type(), "quantize_nf4: weight");
  check_blocksize_4bit(blocksize, "quantize_nf4");
  Nf4Weight w;
  w.blocksize = blocksize;
  w.quant_type = quant_type;
  w.shape = weight.sizes().vec();
  w.dtype = weight.scalar_type();
  const auto device = weight.device();
  at::Tensor fp32_absmax;  // (blocks,)
  if (weight.is_cuda()) {
#ifdef FINETUNE_WITH_CUDA
    const auto input = weight.contiguous();
    const int64_t n = input.numel();
    w.packed = at::empty({(n + 1) / 2, 1}, input.options().dtype(at::kByte));
    fp32_absmax = at::empty({(n + blocksize - 1) / blocksize}, input.options().dtype(at::kFloat));
    quant_cuda::quantize_4bit(input, blocksize, quant_type, w.packed, fp32_absmax);
#else
    throw Error("quantize_nf4: this build has no CUDA kernels");
#endif
  } else if (weight.is_cpu()) {
    std::tie(w.packed, fp32_absmax) = quantize_4bit_cpu(weight, blocksize, quant_type);
  } else {
    throw Error("quantize_nf4: the weight must be on the CPU or a CUDA device, got " + device.str());
  }
  w.quant_map = quant_map_4bit(quant_type).to(device);
  w.nested = compress_statistics;
  if (!compress_statistics) {
    w.absmax = fp32_absmax;
    return w;
  }
  w.nested_blocksize = kNestedBlocksize;
  w.offset = fp32_absmax.mean();
  const auto centered = fp32_absmax - w.offset;
  w.nested_quant_map = dynamic_map(/*is_signed=*/true).to(device);
  w.absmax = at::empty(centered.sizes(), centered.options().dtype(at::kByte));
  w.nested_absmax = at::empty({(centered.numel() + kNestedBlocksize - 1) / kNestedBlocksize},
                              centered.options().dtype(at::kFloat));
  if (weight.is_cuda()) {
#ifdef FINETUNE_WITH_CUDA  // (a CUDA weight got here through the 4-bit kernel above)
    quant_cuda::quantize_blockwise(centered, w.nested_quant_map, kNestedBlocksize, quant_cuda::Rule8bit::CudaSearch,
                                   w.absmax, w.nested_absmax);
#endif
  } else {
    quantize_blockwise_into(centered, w.nested_quant_map, kNestedBlocksize, w.absmax, w.nested_absmax);
  }
  return w;
}

namespace {

// Throws unless w is consistent and out is a buffer dequantize_nf4_into can fill with it.
void check_dequantize_target(const Nf4Weight& w, const at::Tensor& out) {
  check_consistent(w);
  const auto type = out.scalar_type();
  if ((type != at::kFloat && type != at::kBFloat16 && type != at::kHalf) || !out.is_contiguous() ||
      out.sizes() != at::IntArrayRef(w.shape) || out.device() != w.device()) {
    throw Error("dequantize_nf4_into: out must be a contiguous fp32/bf16/fp16 tensor of shape " +
                c10::str(at::IntArrayRef(w.shape)) + " on " + w.device().str() + ", got " + out.toString() + " " +
                c10::str(out.sizes()) + " on " + out.device().str());
  }
}

// Whether the batch can be one CUDA launch: one device, decode table, weight dtype and out dtype.
bool one_cuda_launch(const std::vector<const Nf4Weight*>& weights, const std::vector<at::Tensor>& outs) {
  const Nf4Weight& first = *weights.front();
  if (!first.device().is_cuda()) return false;
  for (size_t i = 0; i < weights.size(); ++i) {
    const Nf4Weight& w = *weights[i];
    if (w.device() != first.device() || w.quant_type != first.quant_type || w.dtype != first.dtype ||
        outs[i].scalar_type() != outs.front().scalar_type()) {
      return false;
    }
  }
  return true;
}

}  // namespace

void dequantize_nf4_batch_into(const std::vector<const Nf4Weight*>& weights, std::vector<at::Tensor>& outs) {
  if (weights.size() != outs.size()) {
    throw Error("dequantize_nf4_batch_into: " + std::to_string(weights.size()) + " weights but " +
                std::to_string(outs.size()) + " outputs");
  }
  if (weights.empty()) return;
  if (one_cuda_launch(weights, outs)) {
#ifdef FINETUNE_WITH_CUDA
    for (size_t i = 0; i < weights.size(); ++i) check_dequantize_target(*weights[i], outs[i]);
    quant_cuda::dequantize_4bit_batch(weights, decode_table(*weights.front()), outs);
    return;
#endif
  }
  for (size_t i = 0; i < weights.size(); ++i) dequantize_nf4_into(*weights[i], outs[i]);
}

void dequantize_nf4_into(const Nf4Weight& w, at::Tensor& out) {
  check_dequantize_target(w, out);
  const auto type = out.scalar_type();
  const auto table = decode_table(w);
  if (w.device().is_cuda()) {
#ifdef FINETUNE_WITH_CUDA
    quant_cuda::dequantize_4bit(w, table, out);
    return;
#else
    throw Error("dequantize_nf4: this build has no CUDA kernels");
#endif
  }
  // bitsandbytes: dequantize_blockwise(absmax, state2) (fp32), then absmax += offset.
  const auto absmax = w.nested ? dequantize_blockwise(w.absmax, w.nested_absmax, w.nested_quant_map,
                                                      w.nested_blocksize, at::kFloat) + w.offset
                               : w.absmax;
  const auto contiguous_absmax = absmax.contiguous();
  // bitsandbytes dequantizes into the weight's dtype; matmul_4bit then casts with torch (.to).
  auto in_weight_dtype = type == w.dtype ? out : at::empty(w.shape, out.options().dtype(w.dtype));
  switch (w.dtype) {
    case at::kFloat: dequantize_cpu(w, contiguous_absmax, table, in_weight_dtype.data_ptr<float>()); break;
    case at::kBFloat16: dequantize_cpu(w, contiguous_absmax, table, in_weight_dtype.data_ptr<at::BFloat16>()); break;
    default: dequantize_cpu(w, contiguous_absmax, table, in_weight_dtype.data_ptr<at::Half>()); break;
  }
  if (type != w.dtype) out.copy_(in_weight_dtype);
}

at::Tensor dequantize_nf4(const Nf4Weight& w, at::ScalarType dtype) {
  auto out = at::empty(w.shape, w.packed.options().dtype(dtype));
  dequantize_nf4_into(w, out);
  return out;
}

}  // namespace finetune
