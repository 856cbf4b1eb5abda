#include "finetune/train/device_batch.h"

#include <algorithm>

namespace finetune {
namespace {

at::Tensor host_tensor(const std::vector<int64_t>& values, int64_t rows, int64_t cols, const at::Device& device) {
  auto cpu = at::from_blob(const_cast<int64_t*>(values.data()), {rows, cols}, at::TensorOptions().dtype(at::kLong));
  if (device.is_cpu()) return cpu.clone();
  return cpu.pin_memory().to(device, /*non_blocking=*/true);
}

AttentionMask mask_for(const HostBatch& batch, const at::Device& device, BatchLayout layout) {
  if (layout == BatchLayout::kFlatRowVariableLength) return variable_length_mask(batch.sample_lengths[0], device);
  return build_attention_mask(batch.sample_lengths, batch.seq_len, device);
}

}  // namespace

BatchLayout batch_layout_for(const KernelPolicy& policy) {
  return policy.padding_free_batches ? BatchLayout::kFlatRowVariableLength : BatchLayout::kPaddedRows;
}

DeviceBatch to_device(const HostBatch& padded, const at::Device& device, BatchLayout layout) {
  const HostBatch batch = layout == BatchLayout::kPaddedRows ? padded : flatten(padded);
  DeviceBatch out;
  out.input_ids = host_tensor(batch.input_ids, batch.rows, batch.seq_len, device);
  out.labels = host_tensor(batch.labels, batch.rows, batch.seq_len, device);
  out.position_ids = host_tensor(batch.position_ids, batch.rows, batch.seq_len, device);
  out.mask = mask_for(batch, device, layout);
  std::vector<int64_t> positions, targets;
  positions.reserve(static_cast<size_t>(batch.trainable_tokens));
  targets.reserve(static_cast<size_t>(batch.trainable_tokens));
  for (int64_t row = 0; row < batch.rows; ++row) {
    const int64_t row_start = row * batch.seq_len;
    for_each_target(batch.labels.data() + row_start, batch.seq_len, [&](int64_t position, int64_t target) {
      positions.push_back(row_start + position);
      targets.push_back(target);
    });
  }
  const auto count = static_cast<int64_t>(positions.size());
  out.target_positions = host_tensor(positions, 1, count, device).view({count});
  out.target_ids = host_tensor(targets, 1, count, device).view({count});
  std::vector<float> real(static_cast<size_t>(batch.rows * batch.seq_len), 0.f);
  for (int64_t row = 0; row < batch.rows; ++row) {
    int64_t length = 0;
    for (int64_t sample : batch.sample_lengths[static_cast<size_t>(row)]) length += sample;
    std::fill_n(real.begin() + row * batch.seq_len, length, 1.f);
  }
  auto real_cpu = at::tensor(real, at::TensorOptions().dtype(at::kFloat));  // queued like host_tensor's copies
  out.real_token_mask = device.is_cpu() ? real_cpu : real_cpu.pin_memory().to(device, /*non_blocking=*/true);
  out.trainable_tokens = batch.trainable_tokens;
  out.real_tokens = batch.real_tokens;
  out.group_ids = padded.group_ids;
  return out;
}

}  // namespace finetune
