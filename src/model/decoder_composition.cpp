#include "finetune/model/decoder_composition.h"

#include "finetune/util/errors.h"

namespace finetune {
namespace {

// Llama: pre-norm residual attention, then a pre-norm residual SwiGLU MLP.
at::Tensor llama_layer(const DecoderLayer& layer, const at::Tensor& hidden, const LayerContext& context) {
  auto h = hidden + attention_block(layer, norm_block(layer, ModuleRole::kAttentionInputNorm, hidden, context), context);
  return h + swiglu_mlp_block(layer, norm_block(layer, ModuleRole::kMlpInputNorm, h, context), context);
}

const DecoderComposition kLlama{llama_layer};
// Qwen2 (q/k/v biases), Qwen3 (q/k norms, applied by attention_block when the table lists them)
// and Mistral (its sliding window is checked by model_config.h) compose Llama's blocks the same way.
const DecoderComposition kQwen2{llama_layer};
const DecoderComposition kQwen3{llama_layer};
const DecoderComposition kMistral{llama_layer};
// Phi-3: Llama's layer over fused qkv_proj / gate_up_proj; its partial rotary and longrope live in rope.h.
const DecoderComposition kPhi3{llama_layer};

}  // namespace

const DecoderComposition& decoder_composition(ArchitectureId id) {
  switch (id) {
    case ArchitectureId::kLlama: return kLlama;
    case ArchitectureId::kQwen2: return kQwen2;
    case ArchitectureId::kQwen3: return kQwen3;
    case ArchitectureId::kMistral: return kMistral;
    case ArchitectureId::kPhi3: return kPhi3;
  }
  throw Error("decoder_composition: unknown architecture id " + std::to_string(static_cast<int>(id)));
}

}  // namespace finetune
