#include "finetune/train/step_profiler.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include "finetune/util/atomic_file.h"
#include "finetune/util/log.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

std::set<torch::profiler::impl::ActivityType> activities(const at::Device& device) {
  std::set<torch::profiler::impl::ActivityType> out{torch::profiler::impl::ActivityType::CPU};
  if (device.is_cuda()) out.insert(torch::profiler::impl::ActivityType::CUDA);
  return out;
}

// Waits for the device's queued work, so the window's wall time covers exactly its steps.
void synchronize_device(const at::Device& device) {
  if (!device.is_cuda()) return;
  c10::impl::VirtualGuardImpl guard(device.type());
  guard.synchronizeDevice(device.index());
}

}  // namespace

std::string kernel_category(const std::string& kernel_name) {
  const auto name = lowercase(kernel_name);
  if (contains(name, "nccl")) return "nccl";
  if (contains(name, "flash") || contains(name, "fmha") || contains(name, "attention")) return "attention";
  if (contains(name, "gemm") || contains(name, "nvjet") || contains(name, "xmma") || contains(name, "cutlass") ||
      contains(name, "cublas") || contains(name, "splitk")) {
    return "gemm";
  }
  if (contains(name, "memcpy") || contains(name, "memset")) return "copy";
  return "other";
}

std::string format_kernel_summary(std::vector<KernelTime> kernels, double wall_ms, int64_t steps, size_t top,
                                  const std::string& step_kind) {
  std::map<std::string, KernelTime> categories;
  double device_ms = 0;
  for (const auto& k : kernels) {
    auto& c = categories[kernel_category(k.name)];
    c.name = kernel_category(k.name);
    c.calls += k.calls;
    c.total_ms += k.total_ms;
    device_ms += k.total_ms;
  }
  std::sort(kernels.begin(), kernels.end(), [](const KernelTime& a, const KernelTime& b) {
    return a.total_ms > b.total_ms;
  });
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line, "%lld %s, wall %.1f ms (%.1f ms/step); device kernels %.1f ms (%.1f%% of wall)\n\n",
                static_cast<long long>(steps), step_kind.c_str(), wall_ms, wall_ms / std::max<int64_t>(1, steps), device_ms,
                wall_ms > 0 ? 100.0 * device_ms / wall_ms : 0.0);
  out << line;
  std::snprintf(line, sizeof line, "%-10s %10s %12s %8s %8s\n", "category", "calls", "ms", "%kernel", "%wall");
  out << line;
  for (const auto& [name, c] : categories) {
    std::snprintf(line, sizeof line, "%-10s %10lld %12.2f %8.1f %8.1f\n", name.c_str(), static_cast<long long>(c.calls),
                  c.total_ms, device_ms > 0 ? 100.0 * c.total_ms / device_ms : 0.0,
                  wall_ms > 0 ? 100.0 * c.total_ms / wall_ms : 0.0);
    out << line;
  }
  out << "\ntop kernels by device time:\n";
  std::snprintf(line, sizeof line, "%10s %8s %8s %-9s %s\n", "ms", "calls", "%kernel", "category", "kernel");
  out << line;
  for (size_t i = 0; i < std::min(top, kernels.size()); ++i) {
    const auto& k = kernels[i];
    std::snprintf(line, sizeof line, "%10.2f %8lld %8.1f %-9s %.300s\n", k.total_ms, static_cast<long long>(k.calls),
                  device_ms > 0 ? 100.0 * k.total_ms / device_ms : 0.0, kernel_category(k.name).c_str(), k.name.c_str());
    out << line;
  }
  return out.str();
}

StepProfiler::StepProfiler(int64_t first_step, int64_t steps, std::string output_dir, int rank, at::Device device,
                           std::string step_kind)
    : first_step_(first_step),
      last_step_(first_step + std::max<int64_t>(1, steps) - 1),
      output_dir_(std::move(output_dir)),
      step_kind_(std::move(step_kind)),
      rank_(rank),
      device_(device) {}

void StepProfiler::before_step(int64_t step) {
  if (first_step_ <= 0 || step != first_step_) return;
  synchronize_device(device_);
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  torch::autograd::profiler::prepareProfiler(config, activities(device_));
  torch::autograd::profiler::enableProfiler(config, activities(device_));
  active_ = true;
  start_ = std::chrono::steady_clock::now();
}

void StepProfiler::after_step(int64_t step) {
  if (!active_ || step != last_step_) return;
  synchronize_device(device_);
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  auto result = torch::autograd::profiler::disableProfiler();
  active_ = false;
  std::map<std::string, KernelTime> by_name;
  for (const auto& event : result->events()) {
    if (event.deviceType() != c10::DeviceType::CUDA) continue;
    auto& k = by_name[event.name()];
    k.name = event.name();
    k.calls += 1;
    k.total_ms += static_cast<double>(event.durationNs()) / 1e6;
  }
  std::vector<KernelTime> kernels;
  for (auto& [name, k] : by_name) kernels.push_back(std::move(k));
  std::filesystem::create_directories(output_dir_);
  const std::string suffix = "-rank" + std::to_string(rank_);
  const auto summary = format_kernel_summary(kernels, wall_ms, last_step_ - first_step_ + 1, 40, step_kind_);
  write_file_atomically(output_dir_ + "/kernel_summary" + suffix + ".txt", summary);
  result->save(output_dir_ + "/profile" + suffix + ".json");
  if (rank_ == 0) log::info("profile of steps " + std::to_string(first_step_) + "-" + std::to_string(last_step_) +
                            " written to " + output_dir_ + "/kernel_summary" + suffix + ".txt\n" + summary);
}

}  // namespace finetune
