#include "checkpoint_4bit.h"

#include "finetune/weights/tensor_io.h"
#include "finetune/util/errors.h"

namespace finetune {

TensorLookup checkpoint_tensor_lookup(const CheckpointFiles& files, std::vector<std::string>& read) {
  return [&files, &read](const std::string& tensor_name) {
    if (!files.contains(tensor_name)) return at::Tensor();
    read.push_back(tensor_name);
    return tensor_view(files.file_of(tensor_name), files.info(tensor_name));
  };
}

bool stored_in_4bit(const CheckpointFiles& files, const std::string& name, std::vector<std::string>& read) {
  return saved_quant_type(name, checkpoint_tensor_lookup(files, read)).has_value();
}

Nf4Weight read_stored_4bit(const CheckpointFiles& files, const std::string& name, const std::vector<int64_t>& shape,
                           const at::Device& device, std::vector<std::string>& read) {
  auto weight = nf4_from_state_dict(name, checkpoint_tensor_lookup(files, read));
  if (weight.shape != shape) {
    throw Error(files.file_of(name).path() + ": 4-bit tensor '" + name + "' has shape " + shape_to_string(weight.shape) +
                " but the model (config.json) expects " + shape_to_string(shape));
  }
  for (at::Tensor* tensor : {&weight.packed, &weight.absmax, &weight.quant_map, &weight.nested_absmax,
                             &weight.nested_quant_map, &weight.offset}) {
    if (tensor->defined()) *tensor = tensor->to(device, /*non_blocking=*/false, /*copy=*/true);
  }
  return weight;
}

Nf4Weight quantize_checkpoint_weight(const CheckpointFiles& files, const std::string& name, at::IntArrayRef shape,
                                     const at::TensorOptions& options) {
  // Converted to the model dtype first (transformers quantizes the weight it loaded in `dtype`).
  const auto dense = weight_view(files, name, shape).to(options);
  return quantize_nf4(dense, /*compress_statistics=*/true);
}

void release_read(const CheckpointFiles& files, const std::vector<std::string>& read, std::set<std::string>& consumed) {
  for (const auto& tensor : read) {
    consumed.insert(tensor);
    if (files.contains(tensor)) release_weight(files, tensor);
  }
}

}  // namespace finetune
