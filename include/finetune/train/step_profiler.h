// Optional profile of a window of optimizer steps (--profile_start_step, --profile_steps):
// LibTorch's Kineto profiler records host operators and device kernels of those steps, then
// writes, per rank, a Chrome trace (profile-rank<R>.json, opens in Perfetto or chrome://tracing)
// and a kernel time breakdown (kernel_summary-rank<R>.txt): device time per kernel category
// (GEMM, attention, NCCL, elementwise/other) and per kernel, against the window's wall time.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace finetune {

struct KernelTime {
  std::string name;
  int64_t calls = 0;
  double total_ms = 0;
};

// The category of a device kernel by its name: "gemm", "attention", "nccl", "copy" or "other".
std::string kernel_category(const std::string& kernel_name);

// Kernel times -> the text of kernel_summary-rank<R>.txt (categories, then the top `top` kernels).
// `step_kind` names the steps in its first line ("optimizer steps", "decode steps").
std::string format_kernel_summary(std::vector<KernelTime> kernels, double wall_ms, int64_t steps, size_t top,
                                  const std::string& step_kind = "optimizer steps");

class StepProfiler {
 public:
  // Profiles optimizer steps first_step .. first_step + steps - 1 (1-based); first_step 0: never.
  StepProfiler(int64_t first_step, int64_t steps, std::string output_dir, int rank, at::Device device,
               std::string step_kind = "optimizer steps");

  void before_step(int64_t step);  // `step` is 1-based
  void after_step(int64_t step);

 private:
  int64_t first_step_;
  int64_t last_step_;
  std::string output_dir_;
  std::string step_kind_;
  int rank_;
  at::Device device_;
  bool active_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace finetune
