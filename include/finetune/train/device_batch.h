// A HostBatch moved onto the compute device in the layout the model's kernels take, with its
// attention mask built and its trained positions located (Note [Next-token targets] in
// data/sample.h).
#pragma once

#include <ATen/ATen.h>

#include "finetune/data/batch.h"
#include "finetune/model/attention_mask.h"
#include "finetune/model/kernel_policy.h"
#include "finetune/train/loss.h"

namespace finetune {

enum class BatchLayout {
  kPaddedRows,             // the collated rows as they are; an explicit mask where rows are padded or packed
  kFlatRowMasked,          // one padding-free row, samples kept apart by a block-diagonal mask (SDPA)
  kFlatRowVariableLength,  // one padding-free row through variable-length flash attention
};

// The layout the model's kernels were chosen for: the flat row where the policy has
// variable-length attention, padded rows otherwise.
BatchLayout batch_layout_for(const KernelPolicy& policy);

struct DeviceBatch {
  at::Tensor input_ids;     // (B, T) int64
  at::Tensor labels;        // (B, T) int64, -100 where not trained
  at::Tensor position_ids;  // (B, T) int64
  AttentionMask mask;
  // Flat indices into (B*T) of the positions whose next token is trained on, and those tokens:
  // found on the host, so the loss needs no device->host sync to locate them.
  at::Tensor target_positions;  // (N) int64
  at::Tensor target_ids;        // (N) int64
  at::Tensor real_token_mask;   // (B*T) fp32: 1 at a sample's tokens, 0 at padding (HF's attention_mask, flat)
  int64_t trainable_tokens = 0;
  int64_t real_tokens = 0;
  std::vector<int64_t> group_ids;  // HostBatch::group_ids

  TokenTargets targets() const { return {target_positions, target_ids, at::Tensor()}; }
};

DeviceBatch to_device(const HostBatch& batch, const at::Device& device, BatchLayout layout);

}  // namespace finetune
