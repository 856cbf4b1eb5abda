#include "finetune/commands/gguf_precheck.h"

#include <optional>
#include <set>
#include <utility>

#include "finetune/gguf/gguf_model_keys.h"
#include "finetune/gguf/gguf_quant_mix.h"
#include "finetune/gguf/gguf_quantize.h"
#include "finetune/gguf/gguf_tensor_names.h"
#include "finetune/gguf/gguf_vocab.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// The row lengths (ne[0]: input features) of the model's matrices: embeddings, q/k/v, gate/up and
// lm_head read hidden_size values per row, o_proj heads x head_dim, down_proj intermediate_size (a
// MoE model's expert down stacks moe_intermediate_size: its GGUF has experts in every layer).
std::set<int64_t> matrix_row_lengths(const ModelConfig& config) {
  const int64_t head_dim = config.head_dim > 0 ? config.head_dim : config.hidden_size / config.num_attention_heads;
  const int64_t down_rows = config.moe ? config.moe->moe_intermediate_size : config.intermediate_size;
  return {config.hidden_size, config.num_attention_heads * head_dim, down_rows};
}

// The 32-value type a mix forces on rows it has no fallback for (gguf_quant_mix.cpp: fallback), and
// those rows: every matrix for q4_0 / q5_0; attn_k and attn_v (hidden_size wide) for any mix of a
// model with 8 experts (Q8_0). Nullopt when the mix forces none.
std::optional<std::pair<GgmlType, std::set<int64_t>>> rows_without_fallback(const ModelConfig& config,
                                                                           const GgufQuantMix& mix) {
  if (mix.default_type == GgmlType::kQ4_0 || mix.default_type == GgmlType::kQ5_0) {
    return std::make_pair(mix.default_type, matrix_row_lengths(config));
  }
  if (config.moe && config.moe->num_experts == 8) {
    return std::make_pair(GgmlType::kQ8_0, std::set<int64_t>{config.hidden_size});
  }
  return std::nullopt;
}

}  // namespace

void check_gguf_export_possible(const ModelConfig& config, const std::string& model_dir,
                                const std::vector<std::string>& quantizations, const std::string& option) {
  const std::string prefix = option + " (checked before training): ";
  try {
    check_gguf_model_representable(config, gguf_architecture(config, model_dir), model_dir);
    check_gguf_vocabulary(model_dir);
  } catch (const Error& e) {
    throw UsageError(prefix + e.what());
  }
  for (const auto& name : quantizations) {
    const auto mix = gguf_quant_mix(name);
    if (!mix) continue;
    const auto forced = rows_without_fallback(config, *mix);
    if (!forced) continue;
    const auto& [type, rows] = *forced;
    for (const int64_t row : rows) {
      if (row % ggml_block_size(type) != 0) {
        throw UsageError(prefix + "--quantization " + name + ": the model has rows of " + std::to_string(row) +
                         " values, not a multiple of " + std::to_string(ggml_block_size(type)) +
                         ", and llama.cpp's quantizer writes them as " + ggml_type_name(type) +
                         ", for which it has no fallback (use f16 or q8_0" +
                         (type == GgmlType::kQ8_0 ? "" : " or a k-quant") + ")");
      }
    }
  }
}

}  // namespace finetune
