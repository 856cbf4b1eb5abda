// A Llama-family ModelConfig built in code, for tests that need a model but no checkpoint.
#pragma once

#include "finetune/io/model_config.h"

namespace finetune {

struct TinyShape {
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
      num_key_value_heads, head_dim;
};

inline ModelConfig tiny_llama_config(const TinyShape& shape) {
  ModelConfig config;
  config.architecture = "LlamaForCausalLM";
  config.model_type = "llama";
  config.vocab_size = shape.vocab_size;
  config.hidden_size = shape.hidden_size;
  config.intermediate_size = shape.intermediate_size;
  config.num_hidden_layers = shape.num_hidden_layers;
  config.num_attention_heads = shape.num_attention_heads;
  config.num_key_value_heads = shape.num_key_value_heads;
  config.head_dim = shape.head_dim;
  return config;
}

}  // namespace finetune
