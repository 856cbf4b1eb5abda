#include "finetune/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {

double lr_multiplier(const LrSchedule& schedule, int64_t step) {
  const double warmup = static_cast<double>(schedule.warmup_steps);
  const double current = static_cast<double>(step);
  if (schedule.type == "constant") return 1.0;
  if (step < schedule.warmup_steps) return current / std::max(1.0, warmup);
  if (schedule.type == "constant_with_warmup") return 1.0;
  const double total = static_cast<double>(schedule.total_steps);
  if (schedule.type == "linear") return std::max(0.0, (total - current) / std::max(1.0, total - warmup));
  if (schedule.type == "cosine") {
    const double progress = (current - warmup) / std::max(1.0, total - warmup);
    constexpr double num_cycles = 0.5;
    return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * num_cycles * 2.0 * progress)));
  }
  throw UsageError("--lr_scheduler_type: unsupported '" + schedule.type + "' (supported: " + join(lr_scheduler_types(), ", ") + ")");
}

int64_t resolve_warmup_steps(int64_t warmup_steps, double warmup_ratio, int64_t total_steps) {
  if (warmup_steps > 0) return warmup_steps;
  return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * warmup_ratio));
}

}  // namespace finetune
