#include "finetune/model/kv_cache.h"

namespace finetune {

KVCache allocate_kv_cache(const ModelConfig& config, int64_t batch, int64_t capacity, at::ScalarType dtype,
                          const at::Device& device) {
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  KVCache cache;
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    cache.keys.push_back(at::zeros({batch, config.num_key_value_heads, capacity, config.head_dim}, options));
    cache.values.push_back(at::zeros({batch, config.num_key_value_heads, capacity, config.head_dim}, options));
  }
  return cache;
}

}  // namespace finetune
