// The projection leaf names --target_modules accepts before the model is known: every
// architecture's LoRA target names from the name table (model/architecture.h), each once. The
// option parser and its help text read this list; attach_lora (lora/attach_lora.h) then matches
// the targets against the model's own architecture and names the valid ones when one matches
// nothing. Header-only and LibTorch-free, so the option parser can use it.
#pragma once

#include <string>
#include <vector>

#include "finetune/model/architecture.h"

namespace finetune {

// A reference to one immutable list (the option table keeps references to it).
inline const std::vector<std::string>& projection_names() {
  static const std::vector<std::string> names = all_lora_target_names();
  return names;
}

}  // namespace finetune
