#include "finetune/commands/gguf_precheck.h"

#include <set>

#include "finetune/gguf/gguf_model_keys.h"
#include "finetune/gguf/gguf_quant_mix.h"
#include "finetune/gguf/gguf_quantize.h"
#include "finetune/gguf/gguf_tensor_names.h"
#include "finetune/gguf/gguf_vocab.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// The row lengths (ne[0]: input features) of the model's matrices: embeddings, q/k/v, gate/up and
// lm_head read hidden_size values per row, o_proj heads x head_dim, down_proj intermediate_size.
std::set<int64_t> matrix_row_lengths(const ModelConfig& config) {
  const int64_t head_dim = config.head_dim > 0 ? config.head_dim : config.hidden_size / config.num_attention_heads;
  return {config.hidden_size, config.num_attention_heads * head_dim, config.intermediate_size};
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
    // The mixes whose type has no fallback (gguf_quant_mix.cpp: fallback): the 32-value blocks.
    if (!mix || (mix->default_type != GgmlType::kQ4_0 && mix->default_type != GgmlType::kQ5_0)) continue;
    for (const int64_t row : matrix_row_lengths(config)) {
      if (row % ggml_block_size(mix->default_type) != 0) {
        throw UsageError(prefix + "--quantization " + name + ": the model has rows of " + std::to_string(row) +
                         " values, not a multiple of " + std::to_string(ggml_block_size(mix->default_type)) +
                         ", and llama.cpp's quantizer has no fallback for " + ggml_type_name(mix->default_type) +
                         " (use f16, q8_0 or a k-quant)");
      }
    }
  }
}

}  // namespace finetune
