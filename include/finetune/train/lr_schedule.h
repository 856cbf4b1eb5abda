// Learning-rate schedules of transformers' get_scheduler, as multipliers of the base rate.
// `step` counts optimizer steps already taken (HF's LambdaLR: the first update uses step 0).
#pragma once

#include <cstdint>
#include <string>

#include "finetune/train/lr_scheduler_names.h"

namespace finetune {

struct LrSchedule {
  std::string type = "linear";  // one of lr_scheduler_types()
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
};

double lr_multiplier(const LrSchedule& schedule, int64_t step);

// HF TrainingArguments.get_warmup_steps: warmup_steps if > 0, else ceil(total * warmup_ratio).
int64_t resolve_warmup_steps(int64_t warmup_steps, double warmup_ratio, int64_t total_steps);

}  // namespace finetune
