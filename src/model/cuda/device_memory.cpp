#include "finetune/model/device_memory.h"

#include <c10/cuda/CUDACachingAllocator.h>

namespace finetune {

std::optional<double> peak_device_memory_gib(const at::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  const auto& peak = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  return static_cast<double>(peak) / static_cast<double>(1ull << 30);
}

void reset_peak_device_memory(const at::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

}  // namespace finetune
