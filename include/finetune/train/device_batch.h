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
  // Flat indices into (B*T) of the positions whose next token is trained on, and those tokens:
  // found on the host, so the loss needs no device->host sync to locate them.
  at::Tensor target_positions;  // (N) int64
  at::Tensor target_ids;        // (N) int64
  int64_t trainable_tokens = 0;
  int64_t real_tokens = 0;
};

// variable_length: flatten the batch into one padding-free row (model.kernel_policy().variable_length_attention).
DeviceBatch to_device(const HostBatch& batch, const at::Device& device, bool variable_length = false);

}  // namespace finetune
