// How each architecture composes the shared blocks (decoder_blocks.h) into a decoder, as
// llama.cpp's per-architecture graph builders do: one layer function per architecture, plus the
// hooks where a family transforms the embedding output (Gemma scales it by sqrt(hidden_size)) or
// the logits (Gemma-2's final soft-cap). A new architecture is one composition here and one entry
// in the name table (architecture.h).
#pragma once

#include <optional>

#include <ATen/ATen.h>

#include "finetune/io/model_config.h"
#include "finetune/model/architecture.h"
#include "finetune/model/decoder_blocks.h"

namespace finetune {

struct DecoderComposition {
  // One decoder layer: hidden (B, T, C) -> (B, T, C).
  at::Tensor (*layer)(const DecoderLayer& layer, const at::Tensor& hidden, const LayerContext& context);
  // The embedding lookup (B, T, C) -> the first layer's input; null: unchanged.
  at::Tensor (*scale_embeddings)(const at::Tensor& embeddings, const ModelConfig& config) = nullptr;
  // The final logit soft-cap c (logits -> c * tanh(logits / c)) the config asks for; null: none.
  std::optional<double> (*final_logit_softcapping)(const ModelConfig& config) = nullptr;
};

const DecoderComposition& decoder_composition(ArchitectureId id);

}  // namespace finetune
