#include "finetune/train/device_batch.h"

namespace finetune {
namespace {

at::Tensor host_tensor(const std::vector<int64_t>& values, int64_t rows, int64_t cols, const at::Device& device) {
  auto cpu = at::from_blob(const_cast<int64_t*>(values.data()), {rows, cols}, at::TensorOptions().dtype(at::kLong));
  if (device.is_cpu()) return cpu.clone();
  return cpu.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace

DeviceBatch to_device(const HostBatch& batch, const at::Device& device) {
  DeviceBatch out;
  out.input_ids = host_tensor(batch.input_ids, batch.rows, batch.seq_len, device);
  out.labels = host_tensor(batch.labels, batch.rows, batch.seq_len, device);
  out.position_ids = host_tensor(batch.position_ids, batch.rows, batch.seq_len, device);
  out.mask = build_attention_mask(batch.sample_lengths, batch.seq_len, device);
  out.trainable_tokens = batch.trainable_tokens;
  out.real_tokens = batch.real_tokens;
  return out;
}

}  // namespace finetune
