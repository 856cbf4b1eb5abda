// Fetching what a run names by hub id into the cache before anything reads it (huggingface_hub's
// snapshot_download, limited to the files finetune needs: repo_files.h). Afterwards the cache
// lookups (hub/cache_lookup.h, data/dataset_source.h) find everything as if it had been there.
//   model    repo info for the revision -> the configuration, tokenizer and safetensors files
//   dataset  repo info of main -> the data files of the wanted splits, as HF datasets splits the
//            repo; a repo without data files finetune reads (csv, a loading script, ...) -> the same
//            from its auto-converted Parquet branch, refs/convert/parquet
// Offline (HF_HUB_OFFLINE=1) nothing is requested. When the hub cannot be reached but the cache
// already holds the revision, the cached files are used, with a warning (as huggingface_hub does).
#pragma once

#include <string>
#include <vector>

#include "finetune/hub/hub_settings.h"

namespace finetune {

struct DatasetWanted {
  std::string id;
  std::vector<std::string> splits;  // the splits to fetch
  bool eval_preference = false;     // also: validation, else test, else the only split
};

struct HubInputs {
  std::string model;                 // a hub id, or "" (a local directory needs nothing)
  std::string revision = "main";
  std::vector<DatasetWanted> datasets;

  bool empty() const { return model.empty() && datasets.empty(); }
  std::string describe() const;     // "Qwen/Qwen3-8B, yahma/alpaca-cleaned"
};

void fetch_hub_inputs(const HubSettings& settings, const HubInputs& inputs);

}  // namespace finetune
