// The local Hugging Face cache, as huggingface_hub lays it out (no network, ever):
//   root: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
//   models--ORG--NAME/ or datasets--ORG--NAME/: snapshots/<commit>/ (files, symlinks into blobs/),
//   refs/<revision> holding a commit: refs/main, and refs/refs/convert/parquet for the revision
//   "refs/convert/parquet" (a dataset's auto-converted Parquet branch)
// `--model_name` resolves here; `--dataset` does through dataset_source.h. When nothing is found
// the error lists every place that was looked at.
#pragma once

#include <string>
#include <vector>

#include "finetune/launch/environment.h"

namespace finetune {

// "ORG/NAME": one slash, no empty part, not a path-looking string.
bool looks_like_hub_id(const std::string& id);

// The cache root, resolved as huggingface_hub.constants does; "" when nothing is configured.
std::string hub_cache_root(const EnvMap& env);

// <cache_root>/models--ORG--NAME (kind "models") or <cache_root>/datasets--ORG--NAME (kind "datasets").
std::string repo_cache_folder(const std::string& cache_root, const std::string& hub_id, const std::string& kind);

// The snapshot directory of `revision` (a commit, or a branch/tag through refs/<revision>) in a
// repo's cache folder; "" when the cache does not hold it.
std::string cached_snapshot(const std::string& repo_folder, const std::string& revision);

// A commit id as the hub writes them: 40 lower-case hex digits.
bool is_commit_hash(const std::string& revision);

// A local model directory, or the snapshot of `revision` (a branch or tag through refs/<revision>,
// or a commit) of a cached model repo.
std::string resolve_model_dir(const std::string& model_name, const EnvMap& env, const std::string& revision = "main");

// The cached snapshots of dataset repo ORG/NAME; an empty string for one that is not there.
struct DatasetSnapshots {
  std::string main;            // refs/main's; without refs/main, the newest snapshot but the Parquet branch's
  std::string parquet_export;  // refs/refs/convert/parquet's
};
// What was looked at is appended to `tried` (for the caller's "not found" error).
DatasetSnapshots find_dataset_snapshots(const std::string& hub_id, const EnvMap& env, std::vector<std::string>& tried);

// "\n  a\n  b": the places looked at, for an error message.
std::string tried_lines(const std::vector<std::string>& tried);

}  // namespace finetune
