// Resolving `--model_name` and `--dataset` to local files. A local path wins; otherwise a hub id
// "ORG/NAME" is looked up in the local Hugging Face cache (no network, ever):
//   $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub (datasets: same roots)
//   models--ORG--NAME/snapshots/<rev>, with <rev> read from refs/main when present
//   datasets--ORG--NAME/snapshots/<rev>/**.json[l]
// When nothing is found the error lists every place that was looked at.
#pragma once

#include <string>
#include <vector>

#include "finetune/launch/environment.h"

namespace finetune {

std::string resolve_model_dir(const std::string& model_name, const EnvMap& env);

// Data files for a dataset spec: a .json/.jsonl file, a directory of them, or a hub id.
std::vector<std::string> resolve_dataset_files(const std::string& dataset, const EnvMap& env);

}  // namespace finetune
