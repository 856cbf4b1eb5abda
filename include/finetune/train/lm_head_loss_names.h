// --lm_head_loss's values: one list for train/loss.h's LmHeadLoss, the option parser and its help.
// Header-only and LibTorch-free, so the option parser can use it.
#pragma once

#include <string>
#include <vector>

namespace finetune {

// In LmHeadLoss's order: vocab_tiles (Note [Vocabulary-tiled LM head loss] in train/loss.cpp),
// row_chunks (Note [Fused LM head + cross-entropy]).
inline const std::vector<std::string>& lm_head_loss_names() {
  static const std::vector<std::string> names = {"vocab_tiles", "row_chunks"};
  return names;
}

}  // namespace finetune
