// A HostBatch moved onto the compute device, with its attention mask built.
#pragma once

#include <ATen/ATen.h>

#include "finetune/data/batch.h"
#include "finetune/model/attention_mask.h"

namespace finetune {

struct DeviceBatch {
  at::Tensor input_ids;     // (B, T) int64
  at::Tensor labels;        // (B, T) int64, -100 where not trained
  at::Tensor position_ids;  // (B, T) int64
  AttentionMask mask;
  int64_t trainable_tokens = 0;
  int64_t real_tokens = 0;
};

DeviceBatch to_device(const HostBatch& batch, const at::Device& device);

}  // namespace finetune
