#include "finetune/quant/nf4_stack.h"

#include "finetune/util/errors.h"

namespace finetune {

at::Device Nf4Stack::device() const {
  if (pieces.empty()) throw Error("Nf4Stack: no pieces");
  return pieces.front().weight.device();
}

int64_t Nf4Stack::storage_bytes() const {
  int64_t bytes = 0;
  for (const auto& piece : pieces) {
    const auto& w = piece.weight;
    for (const at::Tensor* tensor : {&w.packed, &w.absmax, &w.nested_absmax, &w.offset}) {
      if (tensor->defined()) bytes += static_cast<int64_t>(tensor->nbytes());
    }
  }
  return bytes;
}

void check_nf4_stack(const Nf4Stack& stack, const std::string& context) {
  if (stack.shape.size() != 3) throw Error(context + ": a 4-bit expert stack must be 3-D (E, out, in)");
  const int64_t experts = stack.shape[0], rows = stack.shape[1], width = stack.shape[2];
  std::vector<int64_t> covered(experts, 0);
  for (const auto& piece : stack.pieces) {
    const auto& shape = piece.weight.shape;
    if (shape.size() != 2 || shape[1] != width || piece.expert < 0 || piece.expert >= experts ||
        piece.row_begin != covered[piece.expert] || piece.row_begin + shape[0] > rows) {
      throw Error(context + ": 4-bit piece of expert " + std::to_string(piece.expert) + " at row " +
                  std::to_string(piece.row_begin) + " with shape " + c10::str(at::IntArrayRef(shape)) +
                  " does not fit the stack " + c10::str(at::IntArrayRef(stack.shape)) + " in order");
    }
    if (piece.weight.device() != stack.device()) throw Error(context + ": 4-bit pieces on different devices");
    covered[piece.expert] += shape[0];
  }
  for (int64_t e = 0; e < experts; ++e) {
    if (covered[e] != rows) {
      throw Error(context + ": expert " + std::to_string(e) + " has " + std::to_string(covered[e]) + " of " +
                  std::to_string(rows) + " rows in 4-bit");
    }
  }
}

void dequantize_nf4_stack_into(const Nf4Stack& stack, at::Tensor& out) {
  if (!out.is_contiguous() || out.sizes() != at::IntArrayRef(stack.shape)) {
    throw Error("dequantize_nf4_stack_into: out must be contiguous of shape " + c10::str(at::IntArrayRef(stack.shape)) +
                ", got " + c10::str(out.sizes()));
  }
  std::vector<const Nf4Weight*> weights;
  std::vector<at::Tensor> rows;  // each piece's (rows, in), contiguous
  for (const auto& piece : stack.pieces) {
    weights.push_back(&piece.weight);
    rows.push_back(out[piece.expert].narrow(0, piece.row_begin, piece.weight.shape[0]));
  }
  dequantize_nf4_batch_into(weights, rows);
}

at::Tensor dequantize_nf4_stack(const Nf4Stack& stack, at::ScalarType dtype) {
  auto out = at::empty(stack.shape, at::TensorOptions().dtype(dtype).device(stack.device()));
  dequantize_nf4_stack_into(stack, out);
  return out;
}

}  // namespace finetune
