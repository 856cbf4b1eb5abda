#include "finetune/commands/rank_settings_from.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "finetune/util/errors.h"
#include "finetune/util/sha256.h"

namespace finetune {
namespace {

constexpr std::streamoff kSampledBytes = 1 << 20;

// SHA-256 of the file's first and last kSampledBytes (the whole file when it is smaller).
std::string sampled_digest(const std::filesystem::path& path, std::streamoff size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot read (to compare it across ranks)");
  Sha256 digest;
  std::string buffer(static_cast<size_t>(std::min(size, kSampledBytes)), '\0');
  in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  digest.update(buffer.data(), static_cast<size_t>(in.gcount()));
  if (size > 2 * kSampledBytes) {
    in.seekg(size - kSampledBytes);
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    digest.update(buffer.data(), static_cast<size_t>(in.gcount()));
  } else if (size > kSampledBytes) {
    buffer.resize(static_cast<size_t>(size - kSampledBytes));
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    digest.update(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  return digest.hex_digest();
}

// The shortest text that reads back to the same double (as Python's repr: 0.0002, not
// 0.00020000000000000001), so equal values compare equal and messages read as typed.
std::string exact(double value) {
  char buffer[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

// adapter_config.json's settings without the base model's name: each node may name the same
// model by another path (--model_name is compared by content above).
std::string adapter_settings(nlohmann::json adapter_config) {
  if (adapter_config.is_object()) adapter_config.erase("base_model_name_or_path");
  return adapter_config.dump();
}

}  // namespace

std::string directory_fingerprint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());  // snapshot links resolve to their blobs
  }
  std::sort(files.begin(), files.end());
  Sha256 digest;
  for (const auto& file : files) {
    const auto size = static_cast<std::streamoff>(fs::file_size(file));
    const std::string line = file.filename().string() + " " + std::to_string(size) + " " + sampled_digest(file, size) + "\n";
    digest.update(line.data(), line.size());
  }
  return digest.hex_digest();
}

std::vector<RankSetting> rank_settings_from(const Options& options, const RunIdentity& identity,
                                            const TrainerConfig& trainer, const std::string& model_dir) {
  if (!identity.data) throw Error("rank_settings_from: the run identity has no data identity yet");
  const DataIdentity& data = *identity.data;
  std::vector<RankSetting> settings = {
      {"--model_name", "files " + directory_fingerprint(model_dir)},
      {"--init_adapter", options.init_adapter.empty() ? "none" : "files " + directory_fingerprint(options.init_adapter)},
      {"the adapter settings (--r, --lora_alpha, --target_modules, ...)", adapter_settings(identity.adapter_config)},
      {"--dataset", std::to_string(data.samples) + " samples, fingerprint " + data.samples_fingerprint},
      {"--max_seq_length", std::to_string(data.max_seq_length)},
      {"--packing", data.packing ? "true" : "false"},
      {"--group_by_length", data.group_by_length ? "true" : "false"},
      {"--shuffle", data.shuffle ? "true" : "false"},
      {"--per_device_train_batch_size", std::to_string(identity.per_device_train_batch_size)},
      {"--gradient_accumulation_steps", std::to_string(identity.gradient_accumulation_steps)},
      {"--seed", std::to_string(identity.seed)},
      {"--step_planning", options.step_planning},
      {"--max_steps / --num_train_epochs (steps)", std::to_string(trainer.total_steps)},
      {"--learning_rate", exact(trainer.learning_rate)},
      {"--lr_scheduler_type", trainer.schedule.type},
      {"--lr_scheduler_kwargs", options.lr_scheduler_kwargs.empty() ? "none" : options.lr_scheduler_kwargs},
      {"--warmup_steps / --warmup_ratio (steps)", std::to_string(trainer.schedule.warmup_steps)},
      {"--optim", trainer.optim},
      {"--weight_decay", exact(trainer.adamw.weight_decay)},
      {"--adam_beta1", exact(trainer.adamw.beta1)},
      {"--adam_beta2", exact(trainer.adamw.beta2)},
      {"--adam_epsilon", exact(trainer.adamw.eps)},
      {"--max_grad_norm", exact(trainer.max_grad_norm)},
      {"--dtype", options.dtype},
      {"--load_in_4bit", options.load_in_4bit ? "true" : "false"},
      {"--save_steps", std::to_string(trainer.save_steps)},  // checkpoints and evaluations are collectives
      {"--eval_steps", std::to_string(trainer.eval_steps)},
      {"--eval_strategy", interval_strategy_name(trainer.eval_strategy)},
      {"--save_strategy", interval_strategy_name(trainer.save_strategy)},
      // early stopping ends training at a step every rank must agree on
      {"--early_stopping_patience", std::to_string(trainer.early_stopping_patience)},
      {"--early_stopping_threshold", exact(trainer.early_stopping_threshold)},
      {"--greater_is_better", trainer.greater_is_better ? "true" : "false"},
      {"--load_best_model_at_end", options.load_best_model_at_end ? "true" : "false"},
      // the preference objective (dpo, orpo: the same defaults on every rank of a train run)
      {"--beta", exact(options.beta)},
      {"--loss_type", options.loss_type},
      {"--label_smoothing", exact(options.label_smoothing)},
      {"--truncation_mode", options.truncation_mode},
      {"--precompute_ref_log_probs", options.precompute_ref_log_probs ? "true" : "false"},
  };
  return settings;
}

}  // namespace finetune
