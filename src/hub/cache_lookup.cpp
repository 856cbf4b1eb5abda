// Local Hugging Face cache lookup (the layout huggingface_hub writes; never the network).
#include "finetune/hub/cache_lookup.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "finetune/hub/hub_api.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"
#include "finetune/util/text.h"

namespace finetune {

namespace fs = std::filesystem;

// The hub cache root, resolved as huggingface_hub.constants does (first one configured wins).
std::string hub_cache_root(const EnvMap& env) {
  if (const std::string v = env_value(env, "HF_HUB_CACHE"); !v.empty()) return v;
  if (const std::string v = env_value(env, "HUGGINGFACE_HUB_CACHE"); !v.empty()) return v;  // legacy name
  if (const std::string v = env_value(env, "HF_HOME"); !v.empty()) return v + "/hub";
  if (const std::string v = env_value(env, "XDG_CACHE_HOME"); !v.empty()) return v + "/huggingface/hub";
  if (const std::string v = env_value(env, "HOME"); !v.empty()) return v + "/.cache/huggingface/hub";
  return "";
}

namespace {

// huggingface_hub stores a revision's commit in refs/<revision>: the Parquet branch
// "refs/convert/parquet" in refs/refs/convert/parquet (file_download.py).
const char* const kParquetExportRef = "refs/convert/parquet";

// The commit a refs/<revision> file names, or "" when there is no such file. Its content becomes a
// path (snapshots/<commit>), so anything but a commit id is refused rather than followed.
std::string read_ref(const fs::path& ref) {
  std::error_code ec;
  if (!fs::is_regular_file(ref, ec)) return "";
  std::ifstream in(ref);
  std::string commit;
  std::getline(in, commit);
  commit = trim(commit);
  if (!is_commit_hash(commit)) {
    throw Error(ref.string() + ": holds '" + commit.substr(0, 80) + "', not a commit id (40 lowercase hex digits); "
                "the cache is damaged: delete this file or the repo's cache folder");
  }
  return commit;
}

// A revision names a file under refs/: a repo-relative path without "." or ".." parts.
void require_safe_revision(const std::string& revision) {
  if (!is_repo_relative_path(revision)) {
    throw Error("revision '" + revision + "': not a branch, tag or commit name (it would name a file outside the "
                "cache's refs/)");
  }
}

// The snapshot refs/<revision> names, or "" (with what was looked at appended to `tried`).
// Without that ref and when `newest_otherwise`, the most recently modified snapshot not in
// `taken` (a cache filled by copying, without refs).
std::string find_snapshot(const fs::path& repo, const std::string& revision, bool newest_otherwise,
                          const std::vector<std::string>& taken, std::vector<std::string>& tried) {
  const fs::path snapshots = repo / "snapshots";
  const fs::path ref = repo / "refs" / revision;
  std::error_code ec;
  if (const std::string commit = read_ref(ref); !commit.empty()) {
    const fs::path snapshot = snapshots / commit;
    if (fs::is_directory(snapshot, ec)) return snapshot.string();
    tried.push_back(snapshot.string() + " (named by " + ref.string() + ", missing)");
    return "";
  }
  if (!newest_otherwise) {
    tried.push_back(ref.string() + " (absent)");
    return "";
  }
  std::vector<fs::path> candidates;
  if (fs::is_directory(snapshots, ec))
    for (const auto& entry : fs::directory_iterator(snapshots, ec))
      if (entry.is_directory(ec) && std::find(taken.begin(), taken.end(), entry.path().string()) == taken.end())
        candidates.push_back(entry.path());
  if (candidates.empty()) {
    tried.push_back(snapshots.string() + "/<revision> (no " + ref.string() + ", no snapshot)");
    return "";
  }
  if (candidates.size() > 1) {
    std::sort(candidates.begin(), candidates.end(), [](const fs::path& a, const fs::path& b) {
      std::error_code ignored;
      return fs::last_write_time(a, ignored) > fs::last_write_time(b, ignored);
    });
    log::debug(repo.string() + ": " + std::to_string(candidates.size()) + " snapshots and no " + ref.string() +
               "; using the most recently modified, " + candidates.front().filename().string());
  }
  return candidates.front().string();
}

bool cache_configured(const EnvMap& env, std::vector<std::string>& tried) {
  if (!hub_cache_root(env).empty()) return true;
  tried.push_back("(no Hugging Face cache: HF_HUB_CACHE, HF_HOME and HOME are all unset)");
  return false;
}

}  // namespace

std::string repo_cache_folder(const std::string& cache_root, const std::string& hub_id, const std::string& kind) {
  std::string folder = kind + "--" + hub_id;
  folder.replace(folder.find('/'), 1, "--");
  return (fs::path(cache_root) / folder).string();
}

std::string cached_snapshot(const std::string& repo_folder, const std::string& revision) {
  const fs::path repo(repo_folder);
  std::error_code ec;
  require_safe_revision(revision);
  const std::string commit = is_commit_hash(revision) ? revision : read_ref(repo / "refs" / revision);
  if (commit.empty()) return "";
  const fs::path snapshot = repo / "snapshots" / commit;
  return fs::is_directory(snapshot, ec) ? snapshot.string() : "";
}

bool is_commit_hash(const std::string& revision) {
  return revision.size() == 40 && revision.find_first_not_of("0123456789abcdef") == std::string::npos;
}

bool looks_like_hub_id(const std::string& id) {
  const auto slash = id.find('/');
  return slash != std::string::npos && slash > 0 && slash + 1 < id.size() &&
         id.find('/', slash + 1) == std::string::npos && id[0] != '.' && id[0] != '~';
}

std::string tried_lines(const std::vector<std::string>& tried) {
  std::string out;
  for (const auto& t : tried) out += "\n  " + t;
  return out;
}

std::string resolve_model_dir(const std::string& model_name, const EnvMap& env, const std::string& revision) {
  if (model_name.empty()) throw Error("model_name: empty");
  std::error_code ec;
  if (fs::is_directory(model_name, ec)) return model_name;
  std::vector<std::string> tried = {model_name + " (local directory)"};
  if (fs::exists(model_name, ec))
    throw Error("model " + model_name + ": is a file; expected a model directory (with config.json)");
  if (looks_like_hub_id(model_name) && cache_configured(env, tried)) {
    require_safe_revision(revision);
    const fs::path repo = repo_cache_folder(hub_cache_root(env), model_name, "models");
    if (is_commit_hash(revision)) {
      const fs::path snapshot = repo / "snapshots" / revision;
      if (fs::is_directory(snapshot, ec)) return snapshot.string();
      tried.push_back(snapshot.string() + " (absent)");
    } else {
      // Without refs/<revision>, only the default branch may fall back to the newest snapshot.
      const std::string snapshot = find_snapshot(repo, revision, revision == "main", {}, tried);
      if (!snapshot.empty()) return snapshot;
    }
  }
  throw Error("model " + model_name + " not found (pass a local directory, or a hub id: it is downloaded "
              "unless HF_HUB_OFFLINE=1); looked at:" + tried_lines(tried));
}

DatasetSnapshots find_dataset_snapshots(const std::string& hub_id, const EnvMap& env, std::vector<std::string>& tried) {
  DatasetSnapshots found;
  if (!cache_configured(env, tried)) return found;
  const fs::path repo = repo_cache_folder(hub_cache_root(env), hub_id, "datasets");
  found.parquet_export = find_snapshot(repo, kParquetExportRef, false, {}, tried);
  found.main = find_snapshot(repo, "main", true, {found.parquet_export}, tried);
  return found;
}

}  // namespace finetune
