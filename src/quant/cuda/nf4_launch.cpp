// ATen side of the 4-bit kernels (CUDA builds only): checks, the launch on the tensor's current
// stream, errors as exceptions.
#include "../nf4_cuda.h"

#include <c10/cuda/CUDAGuard.h>

#include "finetune/kernels/kernel_launch.h"
#include "launch_checks.h"
#include "nf4_kernels.h"

namespace finetune::quant_cuda {

void quantize_4bit(const at::Tensor& A, int64_t blocksize, QuantType4bit type, at::Tensor& packed,
                   at::Tensor& absmax) {
  using namespace cuda_kernels;
  check_contiguous_on(A, A.device(), "quantize_nf4: weight");
  check_contiguous_on(packed, A.device(), "quantize_nf4: packed");
  check_contiguous_on(absmax, A.device(), "quantize_nf4: absmax");
  const c10::cuda::CUDAGuard guard(A.device());
  const auto code = type == QuantType4bit::NF4 ? Code4bit::NF4 : Code4bit::FP4;
  check_launch(cuda_kernels::quantize_4bit(element_kind(A.scalar_type(), "quantize_nf4"), A.data_ptr(),
                                           absmax.data_ptr<float>(), packed.data_ptr<uint8_t>(), A.numel(), blocksize,
                                           code, current_stream(A)),
               "quantize_4bit");
}

namespace {

cuda_kernels::Table4bit table_values(const at::Tensor& table) {
  cuda_kernels::Table4bit values;
  const auto cpu_table = table.to(at::kCPU, at::kFloat).contiguous();
  for (int i = 0; i < 16; ++i) values.value[i] = cpu_table.data_ptr<float>()[i];
  return values;
}

cuda_kernels::Absmax4bit absmax_of(const Nf4Weight& w) {
  cuda_kernels::Absmax4bit absmax;
  if (w.nested) {
    absmax.codes = w.absmax.data_ptr<uint8_t>();
    absmax.nested_absmax = w.nested_absmax.data_ptr<float>();
    absmax.nested_code = w.nested_quant_map.data_ptr<float>();
    absmax.offset = w.offset.data_ptr<float>();
    absmax.nested_blocksize = w.nested_blocksize;
  } else {
    absmax.absmax = w.absmax.data_ptr<float>();
  }
  return absmax;
}

}  // namespace

void dequantize_4bit(const Nf4Weight& w, const at::Tensor& table, at::Tensor& out) {
  using namespace cuda_kernels;
  check_contiguous_on(out, w.device(), "dequantize_nf4: out");
  const c10::cuda::CUDAGuard guard(w.device());
  const auto weight_kind = element_kind(w.dtype, "dequantize_nf4: weight dtype");
  check_launch(cuda_kernels::dequantize_4bit(w.packed.data_ptr<uint8_t>(), table_values(table), absmax_of(w),
                                             w.blocksize, w.numel(), weight_kind,
                                             element_kind(out.scalar_type(), "dequantize_nf4: out"), out.data_ptr(),
                                             current_stream(out)),
               "dequantize_4bit");
}

void dequantize_4bit_batch(const std::vector<const Nf4Weight*>& weights, const at::Tensor& table,
                           std::vector<at::Tensor>& outs) {
  using namespace cuda_kernels;
  if (weights.empty()) return;
  if (weights.size() != outs.size()) throw Error("dequantize_nf4_batch: as many outputs as weights needed");
  const Nf4Weight& first = *weights.front();
  std::vector<Dequantize4bitPiece> pieces(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    const Nf4Weight& w = *weights[i];
    check_contiguous_on(outs[i], first.device(), "dequantize_nf4_batch: out");
    if (w.dtype != first.dtype || outs[i].scalar_type() != outs.front().scalar_type()) {
      throw Error("dequantize_nf4_batch: the weights and the outputs must each share one dtype");
    }
    pieces[i].packed = w.packed.data_ptr<uint8_t>();
    pieces[i].absmax = absmax_of(w);
    pieces[i].blocksize = w.blocksize;
    pieces[i].n = w.numel();
    pieces[i].out = outs[i].data_ptr();
  }
  const c10::cuda::CUDAGuard guard(first.device());
  check_launch(dequantize_4bit_pieces(pieces.data(), static_cast<int64_t>(pieces.size()), table_values(table),
                                      element_kind(first.dtype, "dequantize_nf4_batch: weight dtype"),
                                      element_kind(outs.front().scalar_type(), "dequantize_nf4_batch: out"),
                                      current_stream(outs.front())),
               "dequantize_4bit_pieces");
}

}  // namespace finetune::quant_cuda
