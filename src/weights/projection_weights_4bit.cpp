#include "finetune/weights/projection_weights_4bit.h"

#include "finetune/weights/model_weights.h"
#include "finetune/weights/tensor_io.h"
#include "finetune/quant/nf4.h"
#include "finetune/quant/nf4_state_dict.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// The checkpoint's tensors by name (CPU views; undefined when absent), recording in `read` what was read.
TensorLookup tensor_lookup(const CheckpointFiles& files, std::vector<std::string>& read) {
  return [&files, &read](const std::string& tensor_name) {
    if (!files.contains(tensor_name)) return at::Tensor();
    read.push_back(tensor_name);
    return tensor_view(files.file_of(tensor_name), files.info(tensor_name));
  };
}

// A projection stored 4-bit: `name` (the packed codes) and its statistics, as transformers saves them.
Nf4Weight stored_4bit(const CheckpointFiles& files, const std::string& name, const Linear& linear,
                      std::vector<std::string>& read) {
  auto weight = nf4_from_state_dict(name, tensor_lookup(files, read));
  const std::vector<int64_t> expected = linear.weight.sizes().vec();
  if (weight.shape != expected) {
    throw Error(files.file_of(name).path() + ": 4-bit tensor '" + name + "' has shape " + shape_to_string(weight.shape) +
                " but the model (config.json) expects " + shape_to_string(expected));
  }
  return weight;
}

// `weight` with tensors of its own on `device`: the lookup's tensors view the mapped checkpoint,
// which is closed after loading.
Nf4Weight owned_on(Nf4Weight weight, const at::Device& device) {
  for (at::Tensor* tensor : {&weight.packed, &weight.absmax, &weight.quant_map, &weight.nested_absmax,
                             &weight.nested_quant_map, &weight.offset}) {
    if (tensor->defined()) *tensor = tensor->to(device, /*non_blocking=*/false, /*copy=*/true);
  }
  return weight;
}

}  // namespace

void load_projections_4bit(CausalLM& model, const CheckpointFiles& files, std::set<std::string>& consumed) {
  at::NoGradGuard no_grad;
  const auto options = at::TensorOptions().dtype(model.dtype()).device(model.device());
  for (auto& [module, linear] : model.named_linears()) {
    const std::string name = checkpoint_tensor_name(model.architecture(), files, module + ".weight");
    std::vector<std::string> read{name};
    if (saved_quant_type(name, tensor_lookup(files, read))) {
      linear->weight_4bit = std::make_shared<const Nf4Weight>(owned_on(stored_4bit(files, name, *linear, read),
                                                                       model.device()));
    } else if (model.config().quantization) {
      // A 4-bit checkpoint keeps this projection in 16-bit (llm_int8_skip_modules): so do we.
      linear->weight = at::empty(linear->weight.sizes(), options);
      copy_weight(linear->weight, files, name);
    } else {
      // Converted to the model dtype first (transformers quantizes the weight it loaded in `dtype`).
      const auto dense = weight_view(files, name, linear->weight.sizes()).to(options);
      linear->weight_4bit = std::make_shared<const Nf4Weight>(quantize_nf4(dense, /*compress_statistics=*/true));
    }
    for (const auto& tensor : read) {
      consumed.insert(tensor);
      if (files.contains(tensor)) release_weight(files, tensor);  // its values are copied or quantized by now
    }
  }
}

}  // namespace finetune
