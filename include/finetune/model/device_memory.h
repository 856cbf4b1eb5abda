// Peak memory the caching allocator has handed out on a device (for the banner and summaries).
#pragma once

#include <optional>

#include <ATen/ATen.h>

namespace finetune {

// GiB allocated at peak since the last reset, or nullopt for the CPU.
std::optional<double> peak_device_memory_gib(const at::Device& device);
void reset_peak_device_memory(const at::Device& device);

}  // namespace finetune
