#include "finetune/checkpoint/run_directory.h"

#include <algorithm>
#include <filesystem>

#include "finetune/util/atomic_directory.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

bool is_run_artifact(const std::string& name) {
  // Temporaries of a run that stopped while saving are not a run's files: the start removes them.
  for (const char* marker : {".tmp-", ".old-", ".tmp."}) {
    if (name.find(marker) != std::string::npos) return false;
  }
  for (const char* file : {"metrics.jsonl", "adapter_model.safetensors", "adapter_config.json", "trainer_state.json",
                           "report.html"}) {
    if (name == file) return true;
  }
  return starts_with(name, "checkpoint-") || (starts_with(name, "profile-rank") && ends_with(name, ".json")) ||
         (starts_with(name, "kernel_summary-rank") && ends_with(name, ".txt"));
}

}  // namespace

std::vector<std::string> run_artifacts(const std::string& output_dir) {
  std::vector<std::string> found;
  std::error_code error;
  for (std::filesystem::directory_iterator it(output_dir, error), end; !error && it != end; it.increment(error)) {
    const auto name = it->path().filename().string();
    if (is_run_artifact(name)) found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

void check_output_dir_reuse(const std::string& output_dir, bool overwrite_output_dir, bool resuming) {
  if (overwrite_output_dir || resuming) return;
  const auto found = run_artifacts(output_dir);
  if (found.empty()) return;
  std::vector<std::string> shown, checkpoints;
  for (const auto& name : found) (starts_with(name, "checkpoint-") ? checkpoints : shown).push_back(name);
  if (checkpoints.size() == 1) shown.push_back(checkpoints.front());
  if (checkpoints.size() > 1) shown.push_back(std::to_string(checkpoints.size()) + " checkpoint-N directories");
  throw UsageError("--output_dir: " + output_dir + " holds another run's files (" + join(shown, ", ") +
                   "); pass --resume_from_checkpoint true to continue that run, --overwrite_output_dir to "
                   "replace it, or choose another --output_dir");
}

void clear_run_artifacts(const std::string& output_dir) {
  for (const auto& name : run_artifacts(output_dir)) remove_atomically(output_dir + "/" + name);
}

}  // namespace finetune
