#include "finetune/train/device_batch.h"

namespace finetune {
namespace {

at::Tensor host_tensor(const std::vector<int64_t>& values, int64_t rows, int64_t cols, const at::Device& device) {
  auto cpu = at::from_blob(const_cast<int64_t*>(values.data()), {rows, cols}, at::TensorOptions().dtype(at::kLong));
  if (device.is_cpu()) return cpu.clone();
  return cpu.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace

DeviceBatch to_device(const HostBatch& padded, const at::Device& device, bool variable_length) {
  const HostBatch batch = variable_length ? flatten(padded) : padded;
  DeviceBatch out;
  out.input_ids = host_tensor(batch.input_ids, batch.rows, batch.seq_len, device);
  out.labels = host_tensor(batch.labels, batch.rows, batch.seq_len, device);
  out.position_ids = host_tensor(batch.position_ids, batch.rows, batch.seq_len, device);
  // On the GPU the flat row runs through flash attention over cumulative lengths; on the CPU the
  // same row gets the equivalent block-diagonal causal mask.
  out.mask = variable_length && device.is_cuda() ? variable_length_mask(batch.sample_lengths[0], device)
                                                 : build_attention_mask(batch.sample_lengths, batch.seq_len, device);
  std::vector<int64_t> positions, targets;
  positions.reserve(static_cast<size_t>(batch.trainable_tokens));
  targets.reserve(static_cast<size_t>(batch.trainable_tokens));
  for (int64_t row = 0; row < batch.rows; ++row) {
    for (int64_t t = 0; t + 1 < batch.seq_len; ++t) {
      const int64_t next = batch.labels[static_cast<size_t>(row * batch.seq_len + t + 1)];
      if (next == kIgnoreIndex) continue;
      positions.push_back(row * batch.seq_len + t);
      targets.push_back(next);
    }
  }
  const auto count = static_cast<int64_t>(positions.size());
  out.target_positions = host_tensor(positions, 1, count, device).view({count});
  out.target_ids = host_tensor(targets, 1, count, device).view({count});
  out.trainable_tokens = batch.trainable_tokens;
  out.real_tokens = batch.real_tokens;
  return out;
}

}  // namespace finetune
