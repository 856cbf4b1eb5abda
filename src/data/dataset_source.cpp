// --dataset / --eval_dataset to files (dataset_source.h).
#include "finetune/data/dataset_source.h"

#include <algorithm>
#include <filesystem>

#include "finetune/data/data_file_splits.h"
#include "finetune/data/datasets_file_types.h"
#include "finetune/hub/cache_lookup.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;

// datasets' builders whose files are handed to the row readers (data/dataset_files.h), which name
// any file type they do not read (yet): json rows, Parquet tables, text lines.
const std::vector<std::string>& readable_builders() {
  static const std::vector<std::string> builders = {"json", "parquet", "text"};
  return builders;
}

}  // namespace

bool finetune_reads_builder(const std::string& builder) {
  const auto& readable = readable_builders();
  return std::find(readable.begin(), readable.end(), builder) != readable.end();
}

namespace {

struct FoundDataset {
  std::string location;
  DataFileSplits splits;
};

void check_builder(const FoundDataset& found, const std::string& what) {
  const auto& readable = readable_builders();
  if (std::find(readable.begin(), readable.end(), found.splits.builder) != readable.end()) return;
  const std::string formats =
      "finetune takes the files of datasets' json (.json, .jsonl, .ndjson), parquet (.parquet) and text (.txt) builders";
  if (found.splits.builder == "zip")
    throw Error(what + ": HF datasets would read the .zip archives in " + found.location +
                "; finetune does not read archives (unpack them): " + formats);
  if (found.splits.builder.empty())
    throw Error(what + ": " + found.location + " has no extension HF datasets knows for data; " + formats);
  throw Error(what + ": HF datasets reads " + found.location + " with its " + found.splits.builder + " builder; " +
              formats);
}

FoundDataset find_local(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return {path, infer_data_file_splits(path)};
  DataFileSplits single;
  single.builder = datasets_builder_for({path});
  single.splits = {{"train", {path}}};
  return {path, single};
}

// ORG/NAME in the cache: refs/main's snapshot when HF datasets finds data files there that finetune
// reads, else the Parquet export. Returns false (with `tried` grown) when neither is there.
bool find_in_cache(const std::string& hub_id, const EnvMap& env, std::vector<std::string>& tried, FoundDataset& out) {
  const DatasetSnapshots snapshots = find_dataset_snapshots(hub_id, env, tried);
  std::string main_problem;
  if (!snapshots.main.empty()) {
    try {
      out = {hub_id + " (" + snapshots.main + ")", infer_data_file_splits(snapshots.main)};
      const auto& readable = readable_builders();
      if (std::find(readable.begin(), readable.end(), out.splits.builder) != readable.end()) return true;
      main_problem = snapshots.main + " holds " + out.splits.builder + " data, which finetune does not read";
    } catch (const Error& e) {
      main_problem = e.what();
    }
    tried.push_back(main_problem);
  }
  if (!snapshots.parquet_export.empty()) {
    out = {hub_id + " (Parquet export " + snapshots.parquet_export + ")", parquet_export_splits(snapshots.parquet_export)};
    if (!main_problem.empty()) log::info(hub_id + ": reading the Parquet export (" + main_problem + ")");
    return true;
  }
  if (!main_problem.empty())
    throw Error(hub_id + ": " + main_problem + ", and the cache has no Parquet export (refs/convert/parquet) of it");
  return false;
}

// The dataset `spec` names: a local path, else a hub id in the cache.
FoundDataset find_dataset(const std::string& spec, const std::string& option, const EnvMap& env) {
  if (spec.empty()) throw UsageError(option + ": empty");
  std::error_code ec;
  if (fs::exists(spec, ec)) return find_local(spec);
  std::vector<std::string> tried = {spec + " (local file or directory)"};
  FoundDataset found;
  if (looks_like_hub_id(spec) && find_in_cache(spec, env, tried, found)) return found;
  throw Error(option + " " + spec + " not found (pass a data file, a directory, or a hub id: it is "
              "downloaded unless HF_HUB_OFFLINE=1); looked at:" + tried_lines(tried));
}

DatasetSplit split_of(const FoundDataset& found, const std::string& split) {
  DatasetSplit out;
  out.location = found.location;
  out.split = split;
  out.splits_found = found.splits.split_names();
  const auto* files = found.splits.files_of(split);
  if (files != nullptr) out.files = *files;
  const auto& partial = found.splits.partial_splits;
  out.partial = std::find(partial.begin(), partial.end(), split) != partial.end();
  if (out.partial) {
    log::warn(found.location + ": split " + split + " of the Parquet export is partial (the dataset viewer "
              "converted only the first rows of a big split)");
  }
  return out;
}

DatasetSplit eval_split_of(const FoundDataset& found, const std::string& eval_dataset) {
  return split_of(found, eval_split_name(found.splits.split_names(), eval_dataset));
}

}  // namespace

std::string eval_split_name(const std::vector<std::string>& names, const std::string& eval_dataset) {
  for (const char* preferred : {"validation", "test"})
    if (std::find(names.begin(), names.end(), preferred) != names.end()) return preferred;
  if (names.size() == 1) return names[0];
  throw UsageError("--eval_dataset " + eval_dataset + ": its splits are " + join(names, ", ") +
                   ", none of them validation or test; name the file (or a directory with one split)");
}

std::string DatasetSplit::describe() const {
  return location + ": split " + split + " (" + std::to_string(files.size()) + (files.size() == 1 ? " file" : " files") +
         "; splits: " + join(splits_found, ", ") + (partial ? "; a partial Parquet export" : "") + ")";
}

DatasetSplit resolve_dataset_split(const std::string& dataset, const std::string& split, const EnvMap& env) {
  const FoundDataset found = find_dataset(dataset, "--dataset", env);
  check_builder(found, "--dataset");
  if (found.splits.files_of(split) == nullptr) {
    throw UsageError("--dataset_split: " + found.location + " has no split \"" + split + "\"; its splits: " +
                     join(found.splits.split_names(), ", ") + " (found from file names as HF datasets finds them)");
  }
  return split_of(found, split);
}

DatasetSplit resolve_eval_dataset(const std::string& eval_dataset, const std::string& dataset,
                                  const std::string& dataset_split, const EnvMap& env) {
  if (eval_dataset.empty()) throw UsageError("--eval_dataset: empty");
  std::error_code ec;
  if (fs::exists(eval_dataset, ec)) {  // 1. an existing path wins
    const FoundDataset found = find_local(eval_dataset);
    check_builder(found, "--eval_dataset");
    if (!dataset.empty() && is_split_name(eval_dataset)) {
      try {
        if (find_dataset(dataset, "--dataset", env).splits.files_of(eval_dataset) != nullptr)
          log::warn("--eval_dataset " + eval_dataset + ": reading the local path " + eval_dataset +
                    ", not the split of that name of --dataset (an existing path wins; run elsewhere to name the split)");
      } catch (const Error&) {
        // --dataset's own problems are reported when it is loaded.
      }
    }
    return eval_split_of(found, eval_dataset);
  }
  std::vector<std::string> tried = {eval_dataset + " (local file or directory)"};
  if (looks_like_hub_id(eval_dataset)) {  // 2. a hub id in the cache
    FoundDataset found;
    if (find_in_cache(eval_dataset, env, tried, found)) {
      check_builder(found, "--eval_dataset");
      return eval_split_of(found, eval_dataset);
    }
  }
  if (is_split_name(eval_dataset) && !dataset.empty()) {  // 3. a split of --dataset
    const FoundDataset found = find_dataset(dataset, "--dataset", env);
    check_builder(found, "--dataset");
    if (found.splits.files_of(eval_dataset) == nullptr) {
      throw UsageError("--eval_dataset " + eval_dataset + ": no such file or directory, and --dataset " +
                       found.location + " has no split of that name; its splits: " +
                       join(found.splits.split_names(), ", "));
    }
    if (eval_dataset == dataset_split)
      log::warn("--eval_dataset " + eval_dataset + " is the split training reads: evaluation measures training data");
    return split_of(found, eval_dataset);
  }
  throw Error("--eval_dataset " + eval_dataset + " not found (pass a file, a directory, a hub id (downloaded "
              "unless HF_HUB_OFFLINE=1), or the name of a split of --dataset); looked at:" +
              tried_lines(tried));
}

}  // namespace finetune
