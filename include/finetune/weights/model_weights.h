// Loading HF safetensors weights into a CausalLM by the names its architecture's table entry
// gives (model/architecture.h, through CausalLM::named_parameters): every expected tensor must be
// present with the model's shape (errors name the file and the tensor); unexpected tensors are an
// error too, except known non-parameter buffers (rotary inv_freq) and what the table says is not
// the text model's (a multimodal checkpoint's vision tower). Tensors are converted to the
// model dtype and copied straight onto its device a block at a time, each block's mapped pages
// given back once copied (tensor_io.h copy_weight), so host memory holds the model (when on the
// CPU) and one block of the checkpoint, not the model and the whole checkpoint. A model built with 4-bit projections gets them
// from projection_weights_4bit.h and its expert stacks from expert_weights_4bit.h (quantized at
// load, or read as a 4-bit checkpoint stores them).
#pragma once

#include <string>

#include "finetune/io/safetensors.h"
#include "finetune/model/causal_lm.h"

namespace finetune {

void load_weights(CausalLM& model, const std::string& model_dir);

// The name the checkpoint stores the model's tensor `name` under: `name` itself, or its spelling
// under one of the architecture's checkpoint_prefix_aliases (a Gemma-3 multimodal checkpoint's
// language_model.model.*); `name` when neither is present (the caller's read reports it missing).
std::string checkpoint_tensor_name(const Architecture& architecture, const CheckpointFiles& files,
                                   const std::string& name);

}  // namespace finetune
