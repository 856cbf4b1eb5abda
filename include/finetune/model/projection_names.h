// The leaf names of the decoder's projections, as transformers names them
// (model.layers.N.self_attn.q_proj, model.layers.N.mlp.down_proj, ...): the one list that the
// model's layout, LoRA's target matching, the option parser and its help text all read.
// Header-only and LibTorch-free, so the option parser can use it.
#pragma once

#include <string>
#include <vector>

namespace finetune {

inline const std::vector<std::string>& projection_names() {
  static const std::vector<std::string> names = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  return names;
}

}  // namespace finetune
