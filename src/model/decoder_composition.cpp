#include "finetune/model/decoder_composition.h"

#include <cmath>

#include "finetune/model/moe_block.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// Llama: pre-norm residual attention, then a pre-norm residual SwiGLU MLP.
at::Tensor llama_layer(const DecoderLayer& layer, const at::Tensor& hidden, const LayerContext& context) {
  auto h = attention_residual(
      hidden + attention_block(layer, norm_block(layer, ModuleRole::kAttentionInputNorm, hidden, context), context),
      context);
  return h + swiglu_mlp_block(layer, norm_block(layer, ModuleRole::kMlpInputNorm, h, context), context);
}

// Gemma-2 and Gemma-3: each sub-block's output is normed before its residual (sandwich norms),
// the MLP is GeGLU. The norms are (1 + w) ones (the table's rms_norm_unit_offset); Gemma-3's q/k
// norms are applied by attention_block when the table lists them.
at::Tensor gemma_layer(const DecoderLayer& layer, const at::Tensor& hidden, const LayerContext& context) {
  auto attention = attention_block(layer, norm_block(layer, ModuleRole::kAttentionInputNorm, hidden, context), context);
  auto h = attention_residual(hidden + norm_block(layer, ModuleRole::kAttentionOutputNorm, attention, context), context);
  auto mlp = geglu_mlp_block(layer, norm_block(layer, ModuleRole::kMlpInputNorm, h, context), context);
  return h + norm_block(layer, ModuleRole::kMlpOutputNorm, mlp, context);
}

// Qwen3-MoE and Mixtral: Llama's pre-norm residual attention, then a pre-norm residual
// mixture-of-experts MLP (a dense SwiGLU one in Qwen3-MoE's mlp_only layers), moe_block.h.
at::Tensor moe_layer(const DecoderLayer& layer, const at::Tensor& hidden, const LayerContext& context) {
  auto h = attention_residual(
      hidden + attention_block(layer, norm_block(layer, ModuleRole::kAttentionInputNorm, hidden, context), context),
      context);
  const auto x = norm_block(layer, ModuleRole::kMlpInputNorm, h, context);
  return h + moe_mlp_forward(*layer.moe, x, context.config, context.kernels, context.training, context.router_logits);
}

// Gemma's scaled word embedding: the lookup times sqrt(hidden_size), a scalar first rounded to
// fp32 (torch.tensor) and then to the embedding dtype, as Gemma2TextScaledWordEmbedding does.
at::Tensor gemma_scale_embeddings(const at::Tensor& embeddings, const ModelConfig& config) {
  const auto scale = at::scalar_tensor(std::sqrt(static_cast<double>(config.hidden_size)), at::kFloat)
                         .to(embeddings.scalar_type());
  return embeddings * scale;
}

std::optional<double> gemma_final_logit_softcapping(const ModelConfig& config) { return config.final_logit_softcapping; }

const DecoderComposition kLlama{llama_layer};
// Qwen2 (q/k/v biases), Qwen3 (q/k norms, applied by attention_block when the table lists them)
// and Mistral (its sliding window is the attention kernel's, attention_kernels.h) compose Llama's
// blocks the same way.
const DecoderComposition kQwen2{llama_layer};
const DecoderComposition kQwen3{llama_layer};
const DecoderComposition kMistral{llama_layer};
// Phi-3: Llama's layer over fused qkv_proj / gate_up_proj; its partial rotary and longrope live in rope.h.
const DecoderComposition kPhi3{llama_layer};
// Gemma-2's attention soft-cap, scale and alternating windows are the attention kernel's; Gemma-3's
// local RoPE base is the model's (causal_lm.cpp).
const DecoderComposition kGemma{gemma_layer, gemma_scale_embeddings, gemma_final_logit_softcapping};
// Qwen3-MoE's q/k norms are attention_block's (the table lists them); Mixtral's window is the
// attention kernel's, as Mistral's.
const DecoderComposition kMoe{moe_layer};

}  // namespace

const DecoderComposition& decoder_composition(ArchitectureId id) {
  switch (id) {
    case ArchitectureId::kLlama: return kLlama;
    case ArchitectureId::kQwen2: return kQwen2;
    case ArchitectureId::kQwen3: return kQwen3;
    case ArchitectureId::kMistral: return kMistral;
    case ArchitectureId::kPhi3: return kPhi3;
    case ArchitectureId::kGemma2:
    case ArchitectureId::kGemma3: return kGemma;
    case ArchitectureId::kQwen3Moe:
    case ArchitectureId::kMixtral: return kMoe;
  }
  throw Error("decoder_composition: unknown architecture id " + std::to_string(static_cast<int>(id)));
}

}  // namespace finetune
