#include "finetune/model/device_memory.h"

// CUDA builds implement these in cuda/device_memory.cpp.
#ifndef FINETUNE_WITH_CUDA
namespace finetune {

std::optional<double> peak_device_memory_gib(const at::Device&) { return std::nullopt; }
void reset_peak_device_memory(const at::Device&) {}
void start_device_memory_history(const at::Device&) {}
void write_device_memory_snapshot(const at::Device&, const std::string&) {}

}  // namespace finetune
#endif
