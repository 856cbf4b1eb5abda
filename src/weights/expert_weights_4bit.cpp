#include "finetune/weights/expert_weights_4bit.h"

#include "checkpoint_4bit.h"
#include "finetune/model/moe_names.h"
#include "finetune/quant/nf4_stack.h"
#include "finetune/weights/model_weights.h"
#include "finetune/weights/tensor_io.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// Which of the stack's checkpoint tensors are stored 4-bit: all (true) or none (false); a mix is an error.
bool pieces_stored_in_4bit(const CheckpointFiles& files, const std::vector<std::string>& names,
                           const std::string& stack) {
  size_t stored = 0;
  for (const auto& name : names) {
    std::vector<std::string> read;
    if (stored_in_4bit(files, name, read)) ++stored;
  }
  if (stored != 0 && stored != names.size()) {
    throw Error("checkpoint stores " + std::to_string(stored) + " of the " + std::to_string(names.size()) +
                " expert tensors of " + stack + " in 4-bit and the others in 16-bit");
  }
  return stored != 0;
}

// The stack's pieces (stored under `names`, one per piece), each quantized (or read as stored) on
// its own; the tensors read go to `consumed`.
Nf4Stack stack_4bit(const CausalLM& model, const CheckpointFiles& files, const std::vector<CheckpointPiece>& pieces,
                    const std::vector<std::string>& names, const ExpertStack& stack, bool stored,
                    std::set<std::string>& consumed) {
  const auto options = at::TensorOptions().dtype(model.dtype()).device(model.device());
  Nf4Stack out;
  out.shape = stack.weight.sizes().vec();
  out.dtype = stack.weight.scalar_type();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto& piece = pieces[i];
    const std::string& name = names[i];
    const std::vector<int64_t> shape{piece.rows, stack.in_features()};
    std::vector<std::string> piece_read{name};
    auto weight = stored ? read_stored_4bit(files, name, shape, model.device(), piece_read)
                         : quantize_checkpoint_weight(files, name, shape, options);
    out.pieces.push_back({piece.expert, piece.row_begin, std::move(weight)});
    release_read(files, piece_read, consumed);  // its pages given back before the next piece is read
  }
  return out;
}

}  // namespace

void load_expert_stacks_4bit(CausalLM& model, const CheckpointFiles& files, std::set<std::string>& consumed) {
  at::NoGradGuard no_grad;
  for (auto& [name, stack] : model.named_expert_stacks()) {
    const auto pieces = checkpoint_pieces(model.architecture(), model.config(), name);
    std::vector<std::string> names;
    for (const auto& piece : pieces) names.push_back(checkpoint_tensor_name(model.architecture(), files, piece.name));
    const bool stored = pieces_stored_in_4bit(files, names, name);
    if (!stored && model.config().quantization) {
      // A 4-bit checkpoint keeps the experts in 16-bit (transformers 5 quantizes nn.Linear only): so do we.
      stack->weight = at::empty(stack->weight.sizes(), stack->weight.options().device(model.device()));
      for (size_t i = 0; i < pieces.size(); ++i) {
        copy_weight(stack->weight[pieces[i].expert].narrow(0, pieces[i].row_begin, pieces[i].rows), files, names[i]);
      }
      release_read(files, names, consumed);
    } else {
      auto quantized = stack_4bit(model, files, pieces, names, *stack, stored, consumed);
      check_nf4_stack(quantized, name);
      stack->weight_4bit = std::make_shared<const Nf4Stack>(std::move(quantized));
    }
  }
}

}  // namespace finetune
