#include "finetune/model/device_memory.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/memory_snapshot.h>

#include <fstream>

#include "finetune/util/errors.h"

namespace finetune {
namespace {

// "cuda" without an index means the current device (what the allocator calls it).
c10::DeviceIndex index_of(const at::Device& device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}

}  // namespace

std::optional<double> peak_device_memory_gib(const at::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device));
  const auto& peak = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  return static_cast<double>(peak) / static_cast<double>(1ull << 30);
}

void reset_peak_device_memory(const at::Device& device) {
  if (!device.is_cuda()) return;
  // The allocator sets up its per-device state at its first allocation; before that resetting
  // (e.g. before the model is loaded) is "Invalid device argument".
  (void)at::empty({1}, at::TensorOptions().dtype(at::kByte).device(device));
  c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(device));
}

void start_device_memory_history(const at::Device& device) {
  if (!device.is_cuda()) return;
  // "all": alloc/free events and the live blocks' state, each with its C++ stack (no Python here).
  torch::cuda::_record_memory_history("all", "all", "all");
}

void write_device_memory_snapshot(const at::Device& device, const std::string& path) {
  if (!device.is_cuda()) return;
  const std::string snapshot = torch::cuda::_memory_snapshot_pickled();
  std::ofstream out(path, std::ios::binary);
  out.write(snapshot.data(), static_cast<std::streamsize>(snapshot.size()));
  if (!out) throw Error(path + ": cannot write the CUDA memory snapshot (FINETUNE_CUDA_MEMORY_HISTORY)");
}

}  // namespace finetune
