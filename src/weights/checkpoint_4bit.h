// Reading one 4-bit weight from a checkpoint, shared by the projections' and the expert stacks'
// 4-bit loaders (projection_weights_4bit.h, expert_weights_4bit.h). Internal to src/weights/.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "finetune/io/safetensors.h"
#include "finetune/quant/nf4.h"
#include "finetune/quant/nf4_state_dict.h"

namespace finetune {

// The checkpoint's tensors by name (CPU views; undefined when absent), recording in `read` what was read.
TensorLookup checkpoint_tensor_lookup(const CheckpointFiles& files, std::vector<std::string>& read);

// Whether the checkpoint stores `name` in 4-bit (its packed codes and statistics, as transformers saves them).
bool stored_in_4bit(const CheckpointFiles& files, const std::string& name, std::vector<std::string>& read);

// The 4-bit weight `name` as stored, checked against the shape the model (config.json) expects,
// with tensors of its own on `device` (the lookup's views die with the mapped checkpoint).
Nf4Weight read_stored_4bit(const CheckpointFiles& files, const std::string& name, const std::vector<int64_t>& shape,
                           const at::Device& device, std::vector<std::string>& read);

// The 16-bit weight `name` (of `shape`) converted to options' dtype on its device and quantized
// there to NF4 with double quantization, as transformers + bitsandbytes do for
// BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True).
Nf4Weight quantize_checkpoint_weight(const CheckpointFiles& files, const std::string& name, at::IntArrayRef shape,
                                     const at::TensorOptions& options);

// Adds what was read to `consumed`, giving each tensor's mapped pages back (its values are copied
// or quantized by now).
void release_read(const CheckpointFiles& files, const std::vector<std::string>& read, std::set<std::string>& consumed);

}  // namespace finetune
