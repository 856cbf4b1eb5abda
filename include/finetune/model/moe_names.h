// Where a mixture-of-experts model's tensors live in a checkpoint (Note [Expert tensors] in
// model/architecture.h): the model names one stack per projection (mlp.experts.gate_up_proj,
// (E, 2I, C)); the checkpoint one tensor per expert and projection, under the architecture's own
// spelling. Read by weight loading and merged export. Header-only and LibTorch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "finetune/io/model_config.h"
#include "finetune/model/architecture.h"

namespace finetune {

// One checkpoint tensor and the rows of the model tensor it fills: expert < 0 means the whole
// model tensor; otherwise rows [row_begin, row_begin + rows) of model_tensor[expert].
struct CheckpointPiece {
  std::string name;
  int64_t expert = -1;
  int64_t row_begin = 0;
  int64_t rows = 0;
};

namespace detail {
inline bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace detail

// The checkpoint tensors holding the model tensor `name` (a full name: model.layers.3.mlp.experts.down_proj).
inline std::vector<CheckpointPiece> checkpoint_pieces(const Architecture& architecture, const ModelConfig& config,
                                                      const std::string& name) {
  if (!architecture.moe || !config.moe) return {{name}};
  const MoeLayout& moe = *architecture.moe;
  const std::string router = "." + moe.router + ".weight";
  const std::string gate_up = "." + moe.experts + ".gate_up_proj";
  const std::string down = "." + moe.experts + ".down_proj";
  const auto layer_of = [&](const std::string& suffix) { return name.substr(0, name.size() - suffix.size()) + "."; };
  const std::string experts = moe.checkpoint_block + ".experts.";
  const int64_t width = config.moe->moe_intermediate_size;
  std::vector<CheckpointPiece> pieces;
  if (detail::ends_with(name, router)) {
    pieces.push_back({layer_of(router) + moe.checkpoint_block + ".gate.weight"});
  } else if (detail::ends_with(name, gate_up)) {
    for (int64_t e = 0; e < config.moe->num_experts; ++e) {
      const std::string prefix = layer_of(gate_up) + experts + std::to_string(e) + ".";
      pieces.push_back({prefix + moe.checkpoint_gate + ".weight", e, 0, width});
      pieces.push_back({prefix + moe.checkpoint_up + ".weight", e, width, width});
    }
  } else if (detail::ends_with(name, down)) {
    for (int64_t e = 0; e < config.moe->num_experts; ++e) {
      pieces.push_back({layer_of(down) + experts + std::to_string(e) + "." + moe.checkpoint_down + ".weight", e, 0,
                        config.hidden_size});
    }
  } else {
    pieces.push_back({name});
  }
  return pieces;
}

}  // namespace finetune
