// Learning-rate schedules of transformers' get_scheduler, as multipliers of the base rate.
// `step` counts optimizer steps already taken (HF's LambdaLR: the first update uses step 0).
// --lr_scheduler_kwargs is get_scheduler's scheduler_specific_kwargs: lr_schedule_from reads it
// for the type's own function (get_cosine_with_hard_restarts_schedule_with_warmup's num_cycles,
// get_polynomial_decay_schedule_with_warmup's lr_end and power, ...), refusing a key the function
// does not take, as Python's TypeError does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "finetune/train/lr_scheduler_names.h"

namespace finetune {

struct LrSchedule {
  std::string type = "linear";  // one of lr_scheduler_types()
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double base_lr = 2e-4;  // the optimizer's lr (polynomial's lr_init, cosine_with_min_lr's min_lr / lr)
  // The type's keyword arguments; unset: its function's default.
  std::optional<double> num_cycles;      // cosine*: 0.5; cosine_with_restarts: 1 (an int there)
  double lr_end = 1e-7;                  // polynomial
  double power = 1.0;                    // polynomial
  std::optional<int64_t> timescale;      // inverse_sqrt: num_warmup_steps or 10000
  std::optional<double> min_lr_rate;     // cosine_with_min_lr, cosine_warmup_with_min_lr (or min_lr / base_lr)
  std::optional<double> warmup_lr_rate;  // cosine_warmup_with_min_lr
  int64_t num_decay_steps = 0;           // warmup_stable_decay (required)
  std::optional<int64_t> num_stable_steps;  // warmup_stable_decay: total - warmup - decay
  std::string warmup_type = "linear";    // warmup_stable_decay: linear|cosine|1-sqrt
  std::string decay_type = "cosine";     // warmup_stable_decay: linear|cosine|1-sqrt
  double min_lr_ratio = 0.0;             // warmup_stable_decay
};

// The multiplier of transformers' LambdaLR lambda for the schedule at `step`.
double lr_multiplier(const LrSchedule& schedule, int64_t step);

// The schedule of `type` with get_scheduler's arguments: `kwargs` (a JSON object, or null for
// none) are the type's keyword arguments. UsageError naming --lr_scheduler_kwargs and the key for
// a key the type's function does not take, a value of the wrong type, or a combination its
// function refuses (polynomial: lr_end >= lr; cosine_with_min_lr: neither or both of min_lr and
// min_lr_rate; warmup_stable_decay: no num_decay_steps).
LrSchedule lr_schedule_from(const std::string& type, int64_t warmup_steps, int64_t total_steps, double base_lr,
                            const nlohmann::json& kwargs);

// --lr_scheduler_kwargs' text as a JSON object ("" = none); UsageError for anything else.
nlohmann::json parse_lr_scheduler_kwargs(const std::string& text);

// HF TrainingArguments.get_warmup_steps: warmup_steps if > 0, else ceil(total * warmup_ratio).
int64_t resolve_warmup_steps(int64_t warmup_steps, double warmup_ratio, int64_t total_steps);

}  // namespace finetune
