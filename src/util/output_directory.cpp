#include "finetune/util/output_directory.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "finetune/util/errors.h"

namespace finetune {
namespace fs = std::filesystem;

namespace {

// The nearest existing ancestor of `path` (or `path` itself) when it is not a directory: the
// usual reason a directory cannot be created. Empty when there is none.
fs::path blocking_non_directory(const fs::path& path) {
  std::error_code ec;
  for (fs::path p = path; !p.empty(); p = p.parent_path()) {
    const auto status = fs::status(p, ec);
    if (fs::exists(status)) return fs::is_directory(status) ? fs::path() : p;
    if (p == p.parent_path()) break;  // the root
  }
  return {};
}

// `path` with links, "." and ".." resolved as far as it exists.
fs::path canonical_path(const std::string& path) {
  std::error_code error;
  const auto resolved = fs::weakly_canonical(fs::absolute(path, error), error);
  return error ? fs::absolute(path).lexically_normal() : resolved;
}

// True when `path` is `folder` or lies inside it.
bool is_within(const fs::path& path, const fs::path& folder) {
  const auto relative = path.lexically_relative(folder);
  return !relative.empty() && *relative.begin() != "..";
}

// The cache folder (models--ORG--NAME) holding the model's snapshot; empty when the model is not
// from the hub cache.
fs::path hub_repo_folder(const OutputPlacement& placement) {
  if (placement.hub_cache.empty() || placement.model_dir.empty()) return {};
  const auto cache = canonical_path(placement.hub_cache);
  const auto relative = canonical_path(placement.model_dir).lexically_relative(cache);
  if (relative.empty() || *relative.begin() == ".." || *relative.begin() == ".") return {};
  return cache / *relative.begin();
}

// Why `option` (= `path`) cannot hold a run's output, "" when it can.
std::string output_conflict(const std::string& option, const std::string& path, const OutputPlacement& placement) {
  const auto target = canonical_path(path);
  const std::string named = option + " " + path;
  if (target == target.root_path()) return named + " is the file system root: give the run a directory of its own";
  const std::string model = "--model_name " + placement.model_name;
  const std::string overwrite = ": writing there would overwrite or mix files with the base model; choose another " +
                                option;
  if (!placement.model_dir.empty()) {
    const auto model_dir = canonical_path(placement.model_dir);
    if (target == model_dir) return named + " is the directory of " + model + " (" + model_dir.string() + ")" + overwrite;
    if (is_within(target, model_dir)) {
      return named + " lies inside the directory of " + model + " (" + model_dir.string() + ")" + overwrite;
    }
  }
  const auto repo_folder = hub_repo_folder(placement);
  if (!repo_folder.empty() && is_within(target, repo_folder)) {
    return named + " lies inside the Hugging Face cache's folder of " + model + " (" + repo_folder.string() + ")" +
           overwrite;
  }
  return "";
}

}  // namespace

void create_output_directory(const std::string& path, const std::string& what) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (!ec && fs::is_directory(path, ec)) return;
  const fs::path blocker = blocking_non_directory(path);
  const std::string reason = !blocker.empty() ? "'" + blocker.string() + "' exists and is not a directory"
                             : ec             ? ec.message()
                                              : "not a directory";
  throw Error(what + " '" + path + "': cannot create the directory (" + reason + ")");
}

void check_outputs_apart_from_model(const OutputPlacement& placement) {
  for (const auto& [option, path] : {std::pair<std::string, std::string>{"--output_dir", placement.output_dir},
                                     {"--save_path", placement.save_path}}) {
    if (path.empty()) continue;
    const std::string conflict = output_conflict(option, path, placement);
    if (!conflict.empty()) throw UsageError(conflict);
  }
}

}  // namespace finetune
