#include "finetune/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

double warmup_multiplier(int64_t step, int64_t warmup_steps) {
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps));
}

// float(step - warmup) / float(max(1, total - warmup)), as every decaying schedule computes it.
double decay_progress(const LrSchedule& s, int64_t step) {
  return static_cast<double>(step - s.warmup_steps) /
         static_cast<double>(std::max<int64_t>(1, s.total_steps - s.warmup_steps));
}

double num_cycles_or(const LrSchedule& s, double fallback) { return s.num_cycles.value_or(fallback); }

double required_min_lr_rate(const LrSchedule& s) {
  if (!s.min_lr_rate) {
    throw UsageError("--lr_scheduler_type " + s.type + " needs min_lr or min_lr_rate in --lr_scheduler_kwargs");
  }
  return *s.min_lr_rate;
}

// _get_polynomial_decay_schedule_with_warmup_lr_lambda after the warmup.
double polynomial_multiplier(const LrSchedule& s, int64_t step) {
  if (step > s.total_steps) return s.lr_end / s.base_lr;
  const double lr_range = s.base_lr - s.lr_end;
  const int64_t decay_steps = s.total_steps - s.warmup_steps;
  if (decay_steps == 0) return s.lr_end / s.base_lr;  // Python divides by zero here (step == total == warmup)
  const double pct_remaining =
      1 - static_cast<double>(step - s.warmup_steps) / static_cast<double>(decay_steps);
  const double decay = lr_range * std::pow(pct_remaining, s.power) + s.lr_end;
  return decay / s.base_lr;
}

// _get_cosine_with_min_lr_schedule_with_warmup_lr_rate_lambda (all of it: its warmup differs).
double cosine_warmup_with_min_lr_multiplier(const LrSchedule& s, int64_t step) {
  const double current = static_cast<double>(step);
  const double warmup = static_cast<double>(s.warmup_steps);
  const double total = static_cast<double>(s.total_steps);
  if (current < warmup) {
    if (!s.warmup_lr_rate) return (current + 1.0) / std::max(1.0, warmup);
    const double rate = *s.warmup_lr_rate;
    return rate + (1.0 - rate) * current / static_cast<double>(std::max<int64_t>(1, s.warmup_steps - 1));
  }
  const double progress = (current - warmup + 1.0) / std::max(1.0, total - warmup);
  const double min_lr_rate = required_min_lr_rate(s);
  double factor = 0.5 * (1.0 + std::cos(M_PI * num_cycles_or(s, 0.5) * 2.0 * progress));
  factor = factor * (1 - min_lr_rate) + min_lr_rate;
  return std::max(0.0, factor);
}

double wsd_shape(const std::string& kind, double progress, double num_cycles, bool warmup) {
  if (kind == "linear") return warmup ? progress : 1.0 - progress;
  if (kind == "cosine") {
    return warmup ? 0.5 * (1.0 - std::cos(M_PI * progress)) : 0.5 * (1.0 + std::cos(M_PI * num_cycles * 2.0 * progress));
  }
  return warmup ? 1.0 - std::sqrt(1.0 - progress) : 1.0 - std::sqrt(progress);  // "1-sqrt"
}

// _get_wsd_scheduler_lambda.
double warmup_stable_decay_multiplier(const LrSchedule& s, int64_t step) {
  const int64_t stable = s.num_stable_steps.value_or(s.total_steps - s.warmup_steps - s.num_decay_steps);
  if (step < s.warmup_steps) {
    const double factor = wsd_shape(s.warmup_type, warmup_multiplier(step, s.warmup_steps), 0, true);
    return std::max(0.0, factor * (1.0 - s.min_lr_ratio) + s.min_lr_ratio);
  }
  if (step < s.warmup_steps + stable) return 1.0;
  if (step < s.warmup_steps + stable + s.num_decay_steps) {
    const double progress = static_cast<double>(step - s.warmup_steps - stable) /
                            static_cast<double>(std::max<int64_t>(1, s.num_decay_steps));
    const double factor = wsd_shape(s.decay_type, progress, num_cycles_or(s, 0.5), false);
    return std::max(0.0, factor * (1.0 - s.min_lr_ratio) + s.min_lr_ratio);
  }
  return s.min_lr_ratio;
}

}  // namespace

double lr_multiplier(const LrSchedule& schedule, int64_t step) {
  const auto& s = schedule;
  if (s.type == "constant") return 1.0;
  if (s.type == "warmup_stable_decay") return warmup_stable_decay_multiplier(s, step);
  if (s.type == "cosine_warmup_with_min_lr") return cosine_warmup_with_min_lr_multiplier(s, step);
  if (step < s.warmup_steps) return warmup_multiplier(step, s.warmup_steps);
  if (s.type == "constant_with_warmup") return 1.0;
  const double total = static_cast<double>(s.total_steps);
  const double current = static_cast<double>(step);
  if (s.type == "linear") {
    return std::max(0.0, (total - current) / std::max(1.0, total - static_cast<double>(s.warmup_steps)));
  }
  if (s.type == "cosine") {
    return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * num_cycles_or(s, 0.5) * 2.0 * decay_progress(s, step))));
  }
  if (s.type == "cosine_with_restarts") {
    const double progress = decay_progress(s, step);
    if (progress >= 1.0) return 0.0;
    return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * std::fmod(num_cycles_or(s, 1.0) * progress, 1.0))));
  }
  if (s.type == "polynomial") return polynomial_multiplier(s, step);
  if (s.type == "inverse_sqrt") {
    const int64_t timescale = s.timescale.value_or(s.warmup_steps != 0 ? s.warmup_steps : 10000);
    const int64_t shift = timescale - s.warmup_steps;
    return 1.0 / std::sqrt(static_cast<double>(step + shift) / static_cast<double>(timescale));
  }
  if (s.type == "cosine_with_min_lr") {
    const double min_lr_rate = required_min_lr_rate(s);
    double factor = 0.5 * (1.0 + std::cos(M_PI * num_cycles_or(s, 0.5) * 2.0 * decay_progress(s, step)));
    factor = factor * (1 - min_lr_rate) + min_lr_rate;
    return std::max(0.0, factor);
  }
  throw UsageError("--lr_scheduler_type: unsupported '" + s.type + "' (supported: " + join(lr_scheduler_types(), ", ") + ")");
}

namespace {

// The keyword arguments each type's schedule function takes (besides optimizer, the step counts
// and last_epoch). constant and constant_with_warmup take none.
const std::map<std::string, std::set<std::string>>& schedule_keywords() {
  static const std::map<std::string, std::set<std::string>> keywords = {
      {"linear", {}},
      {"cosine", {"num_cycles"}},
      {"constant", {}},
      {"constant_with_warmup", {}},
      {"cosine_with_restarts", {"num_cycles"}},
      {"polynomial", {"lr_end", "power"}},
      {"inverse_sqrt", {"timescale"}},
      {"cosine_with_min_lr", {"num_cycles", "min_lr", "min_lr_rate"}},
      {"cosine_warmup_with_min_lr", {"num_cycles", "min_lr", "min_lr_rate", "warmup_lr_rate"}},
      {"warmup_stable_decay",
       {"num_decay_steps", "num_stable_steps", "warmup_type", "decay_type", "min_lr_ratio", "num_cycles"}},
  };
  return keywords;
}

std::string where(const std::string& key) { return "--lr_scheduler_kwargs \"" + key + "\""; }

double number_of(const nlohmann::json& value, const std::string& key) {
  if (!value.is_number()) throw UsageError(where(key) + ": expected a number, got " + value.dump());
  const double number = value.get<double>();
  if (!std::isfinite(number)) throw UsageError(where(key) + ": expected a finite number");
  return number;
}

int64_t integer_of(const nlohmann::json& value, const std::string& key, int64_t min_value) {
  if (!value.is_number_integer()) throw UsageError(where(key) + ": expected an integer, got " + value.dump());
  const int64_t number = value.get<int64_t>();
  if (number < min_value) throw UsageError(where(key) + ": expected an integer >= " + std::to_string(min_value));
  return number;
}

std::string shape_of(const nlohmann::json& value, const std::string& key) {
  static const std::vector<std::string> shapes = {"linear", "cosine", "1-sqrt"};
  if (!value.is_string() || std::find(shapes.begin(), shapes.end(), value.get<std::string>()) == shapes.end()) {
    throw UsageError(where(key) + ": expected one of " + join(shapes, ", ") + ", got " + value.dump());
  }
  return value.get<std::string>();
}

void set_keyword(LrSchedule& s, const std::string& key, const nlohmann::json& value) {
  if (key == "num_cycles") s.num_cycles = number_of(value, key);
  if (key == "lr_end") s.lr_end = number_of(value, key);
  if (key == "power") s.power = number_of(value, key);
  if (key == "timescale") s.timescale = integer_of(value, key, 1);
  if (key == "min_lr") s.min_lr_rate = number_of(value, key) / s.base_lr;
  if (key == "min_lr_rate") s.min_lr_rate = number_of(value, key);
  if (key == "warmup_lr_rate") s.warmup_lr_rate = number_of(value, key);
  if (key == "num_decay_steps") s.num_decay_steps = integer_of(value, key, 0);
  if (key == "num_stable_steps") s.num_stable_steps = integer_of(value, key, 0);
  if (key == "warmup_type") s.warmup_type = shape_of(value, key);
  if (key == "decay_type") s.decay_type = shape_of(value, key);
  if (key == "min_lr_ratio") s.min_lr_ratio = number_of(value, key);
}

}  // namespace

LrSchedule lr_schedule_from(const std::string& type, int64_t warmup_steps, int64_t total_steps, double base_lr,
                            const nlohmann::json& kwargs) {
  const auto known = schedule_keywords().find(type);
  if (known == schedule_keywords().end()) {
    throw UsageError("--lr_scheduler_type: unsupported '" + type + "' (supported: " + join(lr_scheduler_types(), ", ") + ")");
  }
  LrSchedule s;
  s.type = type;
  s.warmup_steps = warmup_steps;
  s.total_steps = total_steps;
  s.base_lr = base_lr;
  if (!kwargs.is_null() && !kwargs.is_object()) throw UsageError("--lr_scheduler_kwargs must be a JSON object");
  const auto& allowed = known->second;
  const nlohmann::json keywords = kwargs.is_object() ? kwargs : nlohmann::json::object();
  for (const auto& [key, value] : keywords.items()) {
    if (!allowed.count(key)) {
      throw UsageError(where(key) + ": --lr_scheduler_type " + type + " takes " +
                       (allowed.empty() ? std::string("no keyword arguments")
                                        : "only " + join(std::vector<std::string>(allowed.begin(), allowed.end()), ", ")));
    }
    set_keyword(s, key, value);
  }
  const bool with_min_lr = type == "cosine_with_min_lr" || type == "cosine_warmup_with_min_lr";
  if (with_min_lr && kwargs.is_object() && kwargs.contains("min_lr") == kwargs.contains("min_lr_rate")) {
    throw UsageError("--lr_scheduler_type " + type + ": give one of min_lr and min_lr_rate in --lr_scheduler_kwargs");
  }
  if (with_min_lr && !kwargs.is_object()) {
    throw UsageError("--lr_scheduler_type " + type + " needs min_lr or min_lr_rate in --lr_scheduler_kwargs");
  }
  if (type == "polynomial" && !(base_lr > s.lr_end)) {
    throw UsageError(where("lr_end") + ": lr_end (" + nlohmann::json(s.lr_end).dump() + ") must be smaller than --learning_rate");
  }
  if (type == "warmup_stable_decay" && !(kwargs.is_object() && kwargs.contains("num_decay_steps"))) {
    throw UsageError("--lr_scheduler_type warmup_stable_decay needs num_decay_steps in --lr_scheduler_kwargs");
  }
  return s;
}

nlohmann::json parse_lr_scheduler_kwargs(const std::string& text) {
  if (trim(text).empty()) return nullptr;
  nlohmann::json kwargs;
  try {
    kwargs = parse_json(text, "--lr_scheduler_kwargs");
  } catch (const JsonSyntaxError& e) {
    throw UsageError(e.what());
  }
  if (!kwargs.is_object()) {
    throw UsageError("--lr_scheduler_kwargs must be a JSON object, e.g. '{\"num_cycles\": 2}'");
  }
  return kwargs;
}

int64_t resolve_warmup_steps(int64_t warmup_steps, double warmup_ratio, int64_t total_steps) {
  if (warmup_steps > 0) return warmup_steps;
  return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * warmup_ratio));
}

}  // namespace finetune
