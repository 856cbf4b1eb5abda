// The key/value cache of incremental decoding (CausalLM::forward_cached): per layer, keys and
// values after RoPE, preallocated for the whole generation so a decode step writes one column and
// never reallocates. `length` positions are filled; every row shares the same length (prompts are
// left-padded, generation/generator.h).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/io/model_config.h"

namespace finetune {

struct KVCache {
  std::vector<at::Tensor> keys;    // per layer (B, KV, capacity, D)
  std::vector<at::Tensor> values;  // per layer (B, KV, capacity, D)
  int64_t length = 0;              // filled positions

  int64_t capacity() const { return keys.empty() ? 0 : keys.front().size(2); }
};

// An empty cache for `batch` rows of up to `capacity` positions in the model dtype.
KVCache allocate_kv_cache(const ModelConfig& config, int64_t batch, int64_t capacity, at::ScalarType dtype,
                          const at::Device& device);

}  // namespace finetune
