#include "finetune/weights/projection_weights_4bit.h"

#include "checkpoint_4bit.h"
#include "finetune/weights/model_weights.h"
#include "finetune/weights/tensor_io.h"

namespace finetune {

void load_projections_4bit(CausalLM& model, const CheckpointFiles& files, std::set<std::string>& consumed) {
  at::NoGradGuard no_grad;
  const auto options = at::TensorOptions().dtype(model.dtype()).device(model.device());
  for (auto& [module, linear] : model.named_linears()) {
    const std::string name = checkpoint_tensor_name(model.architecture(), files, module + ".weight");
    std::vector<std::string> read{name};
    if (stored_in_4bit(files, name, read)) {
      linear->weight_4bit = std::make_shared<const Nf4Weight>(
          read_stored_4bit(files, name, linear->weight.sizes().vec(), model.device(), read));
    } else if (model.config().quantization) {
      // A 4-bit checkpoint keeps this projection in 16-bit (llm_int8_skip_modules): so do we.
      linear->weight = at::empty(linear->weight.sizes(), options);
      copy_weight(linear->weight, files, name);
    } else {
      linear->weight_4bit =
          std::make_shared<const Nf4Weight>(quantize_checkpoint_weight(files, name, linear->weight.sizes(), options));
    }
    release_read(files, read, consumed);
  }
}

}  // namespace finetune
