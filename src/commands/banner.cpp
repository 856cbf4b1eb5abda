#include "finetune/commands/banner.h"

#include "finetune/model/device_selection.h"
#include "finetune/util/log.h"

namespace finetune {

std::string with_thousands(int64_t value) {
  std::string digits = std::to_string(value);
  const int first = value < 0 ? 1 : 0;
  for (int i = static_cast<int>(digits.size()) - 3; i > first; i -= 3) digits.insert(static_cast<size_t>(i), ",");
  return digits;
}

// Alpaca, text, raw-text and pre-tokenized rows never reach the chat template: the banner says so
// rather than naming a template no row uses.
std::string chat_template_line(const Datasets& data) {
  const int64_t templated = data.train.stats.templated_rows + (data.eval ? data.eval->stats.templated_rows : 0);
  if (templated == 0) {
    return "not used (no conversation rows; alpaca rows use Unsloth CLI's alpaca prompt, text rows their text)";
  }
  return data.chat_template_description + " (" + with_thousands(templated) + " conversation rows)";
}

void log_banner(const LoadedModel& loaded, const AttachedAdapter& adapter, const Datasets& data,
                const MicroBatchStream& stream, const LaunchEnv& launch, const RunShape& shape) {
  int64_t trainable_count = 0;
  for (const auto& [name, tensor] : adapter.trainable) trainable_count += tensor.numel();
  const auto& model = *loaded.model;
  const auto& lora = adapter.config;
  const auto& stats = data.train.stats;
  const int64_t global_batch = shape.per_device_batch * shape.gradient_accumulation_steps * launch.world_size;
  log::info("finetune | model " + model.config().architecture + " from " + loaded.model_dir + " (" +
            with_thousands(model.parameter_count()) + " parameters, " + dtype_string(model.dtype()) + " on " +
            model.device().str() + (model.projections_4bit() ? ", projections 4-bit" : "") + ", loaded in " +
            c10::str(loaded.load_seconds) + " s" +
            (loaded.load_peak_gib ? ", peak " + c10::str(*loaded.load_peak_gib) + " GiB" : std::string()) + ")");
  log::info("kernels: " + model.kernel_policy().describe());
  log::info("LoRA r=" + std::to_string(lora.r) + " alpha=" + c10::str(lora.lora_alpha) +
            (lora.use_rslora ? " (rsLoRA)" : "") + (lora.use_dora ? " (DoRA)" : "") + " dropout=" + c10::str(lora.lora_dropout) + " | trainable " +
            with_thousands(trainable_count) + " parameters (" +
            c10::str(100.0 * static_cast<double>(trainable_count) / static_cast<double>(model.parameter_count())) + "%)");
  log::info("data " + shape.dataset + ": " + with_thousands(stats.rows_kept) + " rows kept of " +
            with_thousands(stats.rows_read) + " (" + std::to_string(stats.rows_no_trainable) + " without trainable tokens, " +
            std::to_string(stats.rows_bad) + " malformed skipped, " + std::to_string(stats.rows_truncated) +
            " truncated), " + with_thousands(stats.tokens) + " tokens, " + with_thousands(stats.trainable_tokens) +
            " trainable" + (data.eval ? " | eval rows " + std::to_string(data.eval->samples.size()) : ""));
  log::info("chat template: " + chat_template_line(data));
  log::info("batch " + std::to_string(shape.per_device_batch) + " per device x " +
            std::to_string(shape.gradient_accumulation_steps) + " accumulation x " + std::to_string(launch.world_size) +
            " ranks = " + std::to_string(global_batch) + " | step planning " + step_planning_name(stream.planning()) +
            " | " + std::to_string(stream.steps_per_epoch()) +
            " steps per epoch, " + std::to_string(shape.total_steps) + " steps, " + std::to_string(shape.warmup_steps) +
            " warmup | optimizer " + shape.optimizer + " | launcher " + launcher_name(launch.launcher));
}

}  // namespace finetune
