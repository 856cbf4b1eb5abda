// A set of files of one commit of a hub repo into the cache (huggingface_hub's snapshot_download
// with allow_patterns): files already in snapshots/<commit>/ are skipped, the others are looked up
// and downloaded by up to HubSettings::max_workers threads at once under one progress bar, then
// refs/<revision> names the commit. The first failure stops the other transfers and is thrown.
#pragma once

#include <string>
#include <vector>

#include "finetune/hub/hub_api.h"

namespace finetune {

// Returns snapshots/<commit>.
std::string download_snapshot(const HubSettings& settings, const RepoRef& repo, const std::string& commit,
                              const std::vector<std::string>& files);

}  // namespace finetune
