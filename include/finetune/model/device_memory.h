// Peak memory the caching allocator has handed out on a device (for the banner and summaries), and
// the memory still free for tensors (for --offload_activations auto).
#pragma once

#include <optional>

#include <ATen/ATen.h>

namespace finetune {

// GiB allocated at peak since the last reset, or nullopt for the CPU.
std::optional<double> peak_device_memory_gib(const at::Device& device);
void reset_peak_device_memory(const at::Device& device);

// Bytes a new tensor could still take on the device: what the driver reports free plus what the
// caching allocator holds unused; nullopt for the CPU.
std::optional<int64_t> free_device_memory_bytes(const at::Device& device);

}  // namespace finetune
