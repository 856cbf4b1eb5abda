#include "finetune/hub/hub_fetch.h"

#include <algorithm>
#include <optional>

#include "finetune/data/data_file_splits.h"
#include "finetune/data/dataset_source.h"
#include "finetune/hub/cache_lookup.h"
#include "finetune/hub/hub_api.h"
#include "finetune/hub/hub_cache.h"
#include "finetune/hub/repo_files.h"
#include "finetune/hub/snapshot_download.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

const char* const kParquetBranch = "refs/convert/parquet";

// The snapshot the cache already holds for `repo` at its revision; "" when none.
std::string cached_revision(const HubSettings& settings, const RepoRef& repo) {
  return cached_snapshot(RepoCache(settings.cache_root, repo).folder(), repo.revision);
}

// Repo info, or nothing when the hub is unreachable and the cache holds the revision already.
std::optional<RepoInfo> repo_info_or_cache(const HubSettings& settings, const RepoRef& repo) {
  try {
    return fetch_repo_info(settings, repo);
  } catch (const TransportError& e) {
    const std::string snapshot = cached_revision(settings, repo);
    if (snapshot.empty()) throw;
    log::warn(std::string(e.what()) + "; using the cached snapshot " + snapshot);
    return std::nullopt;
  }
}

void fetch_model(const HubSettings& settings, const std::string& id, const std::string& revision) {
  const RepoRef repo{RepoKind::Model, id, revision};
  const auto info = repo_info_or_cache(settings, repo);
  if (!info) return;
  const auto files = model_files_without_shards(repo.describe(), info->files);
  const std::string snapshot = download_snapshot(settings, repo, info->commit, files);
  if (std::find(files.begin(), files.end(), kSafetensorsIndex) != files.end()) {
    const auto shards = shards_of_index(snapshot + "/" + kSafetensorsIndex);
    for (const auto& shard : shards) {
      if (std::find(info->files.begin(), info->files.end(), shard) == info->files.end()) {
        throw Error(repo.describe(kSafetensorsIndex) + ": names the shard " + shard + ", which the repo does not have");
      }
    }
    download_snapshot(settings, repo, info->commit, shards);
  }
}

// The split names `wanted` asks for, among `found`; throws naming the dataset's splits.
std::vector<std::string> chosen_splits(const RepoRef& repo, const DatasetWanted& wanted, const DataFileSplits& found) {
  const auto names = found.split_names();
  std::vector<std::string> chosen;
  for (const auto& split : wanted.splits) {
    if (std::find(names.begin(), names.end(), split) == names.end()) {
      throw UsageError(repo.describe() + " has no split \"" + split + "\"; its splits: " + join(names, ", ") +
                       " (as HF datasets finds them from the file names)");
    }
    chosen.push_back(split);
  }
  if (wanted.eval_preference) chosen.push_back(eval_split_name(names, repo.id));
  return chosen;
}

std::vector<std::string> files_of(const DataFileSplits& found, const std::vector<std::string>& splits) {
  std::vector<std::string> files;
  for (const auto& split : splits)
    for (const auto& file : *found.files_of(split))
      if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
  return files;
}

void fetch_dataset(const HubSettings& settings, const DatasetWanted& wanted) {
  const RepoRef main{RepoKind::Dataset, wanted.id, "main"};
  const auto info = repo_info_or_cache(settings, main);
  if (!info) return;
  std::string main_problem;
  try {
    const DataFileSplits found = infer_listing_splits(main.describe(), info->files);
    if (finetune_reads_builder(found.builder)) {
      download_snapshot(settings, main, info->commit, files_of(found, chosen_splits(main, wanted, found)));
      return;
    }
    main_problem = "its files are " + found.builder + " data, which finetune does not read";
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    main_problem = e.what();
  }
  const RepoRef parquet{RepoKind::Dataset, wanted.id, kParquetBranch};
  RepoInfo export_info;
  try {
    export_info = fetch_repo_info(settings, parquet);
  } catch (const TransportError&) {
    throw;
  } catch (const Error& e) {
    throw Error(main.describe() + ": " + main_problem + ", and its Parquet export is not available: " + e.what());
  }
  log::info(main.describe() + ": " + main_problem + "; fetching the hub's Parquet export (" + kParquetBranch + ")");
  const DataFileSplits found = parquet_export_listing_splits(parquet.describe(), export_info.files);
  download_snapshot(settings, parquet, export_info.commit, files_of(found, chosen_splits(parquet, wanted, found)));
}

}  // namespace

std::string HubInputs::describe() const {
  std::vector<std::string> ids;
  if (!model.empty()) ids.push_back(model);
  for (const auto& dataset : datasets) ids.push_back(dataset.id);
  return join(ids, ", ");
}

void fetch_hub_inputs(const HubSettings& settings, const HubInputs& inputs) {
  if (inputs.empty() || settings.offline) return;
  if (!inputs.model.empty()) fetch_model(settings, inputs.model, inputs.revision);
  for (const auto& dataset : inputs.datasets) fetch_dataset(settings, dataset);
}

}  // namespace finetune
