// Peak memory the caching allocator has handed out on a device (for the banner and summaries), and
// the memory still free for tensors (for --offload_activations auto).
#pragma once

#include <optional>
#include <string>

#include <ATen/ATen.h>

namespace finetune {

// GiB allocated at peak since the last reset, or nullopt for the CPU.
std::optional<double> peak_device_memory_gib(const at::Device& device);
void reset_peak_device_memory(const at::Device& device);

// The caching allocator's history (every allocation and free, with its C++ stack) from this call
// on, and its snapshot written as the pickle torch.cuda.memory._snapshot() gives (read by
// bench/memory_snapshot_summary.py and PyTorch's memory viewer). A diagnostic the benchmarks turn
// on with FINETUNE_CUDA_MEMORY_HISTORY; both do nothing for the CPU.
void start_device_memory_history(const at::Device& device);
void write_device_memory_snapshot(const at::Device& device, const std::string& path);

}  // namespace finetune
