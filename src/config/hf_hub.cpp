// Local Hugging Face cache lookup (the layout huggingface_hub writes; never the network).
#include "finetune/config/hf_hub.h"


#include <algorithm>
#include <filesystem>
#include <fstream>

#include "finetune/util/errors.h"
#include "finetune/util/log.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;

std::string env_value(const EnvMap& env, const std::string& key) {
  const auto it = env.find(key);
  return it == env.end() ? "" : it->second;
}

// The hub cache root, resolved as huggingface_hub.constants does (first one configured wins).
std::string hub_cache_root(const EnvMap& env) {
  if (const std::string v = env_value(env, "HF_HUB_CACHE"); !v.empty()) return v;
  if (const std::string v = env_value(env, "HUGGINGFACE_HUB_CACHE"); !v.empty()) return v;  // legacy name
  if (const std::string v = env_value(env, "HF_HOME"); !v.empty()) return v + "/hub";
  if (const std::string v = env_value(env, "XDG_CACHE_HOME"); !v.empty()) return v + "/huggingface/hub";
  if (const std::string v = env_value(env, "HOME"); !v.empty()) return v + "/.cache/huggingface/hub";
  return "";
}

// "ORG/NAME" (one slash, no empty part, not a path-looking string).
bool looks_like_hub_id(const std::string& id) {
  const auto slash = id.find('/');
  return slash != std::string::npos && slash > 0 && slash + 1 < id.size() &&
         id.find('/', slash + 1) == std::string::npos && id[0] != '.' && id[0] != '~';
}

std::string join_lines(const std::vector<std::string>& tried) {
  std::string out;
  for (const auto& t : tried) out += "\n  " + t;
  return out;
}

// The snapshot directory of a cached repo, or "" (with what was looked at appended to `tried`).
// `kind` is "models" or "datasets".
std::string find_snapshot(const std::string& hub_id, const std::string& kind, const EnvMap& env,
                          std::vector<std::string>& tried) {
  const std::string root = hub_cache_root(env);
  if (root.empty()) {
    tried.push_back("(no Hugging Face cache: HF_HUB_CACHE, HF_HOME and HOME are all unset)");
    return "";
  }
  std::string folder = kind + "--" + hub_id;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path repo = fs::path(root) / folder;
  const fs::path snapshots = repo / "snapshots";
  const fs::path ref = repo / "refs" / "main";

  std::error_code ec;
  if (fs::is_regular_file(ref, ec)) {
    std::ifstream in(ref);
    std::string revision;
    std::getline(in, revision);
    revision = trim(revision);
    const fs::path snapshot = snapshots / revision;
    if (!revision.empty() && fs::is_directory(snapshot, ec)) return snapshot.string();
    tried.push_back(snapshot.string() + " (named by " + ref.string() + ", missing)");
    return "";
  }

  std::vector<fs::path> candidates;
  if (fs::is_directory(snapshots, ec))
    for (const auto& entry : fs::directory_iterator(snapshots, ec))
      if (entry.is_directory(ec)) candidates.push_back(entry.path());
  if (candidates.empty()) {
    tried.push_back(snapshots.string() + "/<revision> (no " + ref.string() + ", no snapshot)");
    return "";
  }
  if (candidates.size() > 1) {
    std::sort(candidates.begin(), candidates.end(), [](const fs::path& a, const fs::path& b) {
      std::error_code ignored;
      return fs::last_write_time(a, ignored) > fs::last_write_time(b, ignored);
    });
    log::debug(repo.string() + ": " + std::to_string(candidates.size()) +
               " snapshots and no refs/main; using the most recently modified, " +
               candidates.front().filename().string());
  }
  return candidates.front().string();
}

bool is_json_data_file(const fs::path& path) {
  const std::string ext = path.extension().string();
  if (ext != ".json" && ext != ".jsonl") return false;
  // Hub dataset repos carry metadata next to the data; it is not training rows.
  const std::string name = path.filename().string();
  return name != "dataset_info.json" && name != "dataset_infos.json" && name != "state.json";
}

// Every .json/.jsonl under `dir` (hidden files and directories skipped), sorted by path.
std::vector<std::string> collect_json_files(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec), end;
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error(dir.string() + ": cannot list: " + ec.message());
    const fs::path& path = it->path();
    if (path.filename().string().rfind('.', 0) == 0) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    // is_regular_file follows the cache's snapshot -> blob symlinks.
    if (fs::is_regular_file(path) && is_json_data_file(path)) files.push_back(path.string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::string resolve_model_dir(const std::string& model_name, const EnvMap& env) {
  if (model_name.empty()) throw Error("model_name: empty");
  std::error_code ec;
  if (fs::is_directory(model_name, ec)) return model_name;
  std::vector<std::string> tried = {model_name + " (local directory)"};
  if (fs::exists(model_name, ec))
    throw Error("model " + model_name + ": is a file; expected a model directory (with config.json)");
  if (looks_like_hub_id(model_name)) {
    const std::string snapshot = find_snapshot(model_name, "models", env, tried);
    if (!snapshot.empty()) return snapshot;
  }
  throw Error("model " + model_name + " not found (there is no download: pass a local directory, or a hub id "
              "already in the Hugging Face cache); looked at:" + join_lines(tried));
}

std::vector<std::string> resolve_dataset_files(const std::string& dataset, const EnvMap& env) {
  if (dataset.empty()) throw Error("dataset: empty");
  std::error_code ec;
  if (fs::is_regular_file(dataset, ec)) {
    const std::string ext = fs::path(dataset).extension().string();
    if (ext != ".json" && ext != ".jsonl")
      throw Error("dataset " + dataset + ": expected a .json or .jsonl file, got \"" + ext + "\"");
    return {dataset};
  }
  if (fs::is_directory(dataset, ec)) {
    std::vector<std::string> files = collect_json_files(dataset);
    if (files.empty()) throw Error("dataset " + dataset + ": directory has no .json/.jsonl files");
    return files;
  }
  std::vector<std::string> tried = {dataset + " (local file or directory)"};
  if (looks_like_hub_id(dataset)) {
    const std::string snapshot = find_snapshot(dataset, "datasets", env, tried);
    if (!snapshot.empty()) {
      std::vector<std::string> files = collect_json_files(snapshot);
      if (!files.empty()) return files;
      tried.push_back(snapshot + " (snapshot has no .json/.jsonl files)");
    }
  }
  throw Error("dataset " + dataset + " not found (there is no download: pass a .json/.jsonl file, a directory, "
              "or a hub id already in the Hugging Face cache); looked at:" + join_lines(tried));
}

}  // namespace finetune
