#include "hub_answers_target.h"

#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <vector>

#include "finetune/data/data_file_splits.h"
#include "finetune/hub/file_download.h"
#include "finetune/hub/hub_api.h"
#include "finetune/hub/hub_cache.h"
#include "finetune/hub/repo_files.h"
#include "finetune/util/errors.h"

namespace finetune::fuzz {
namespace {

namespace fs = std::filesystem;

const char* const kAskedCommit = "0123456789abcdef0123456789abcdef01234567";
const char* const kIndexName = "index.json";  // beside the cache, in the scratch directory

std::vector<std::string> split_parts(const std::string& input) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t nul; parts.size() < 2 && (nul = input.find('\0', start)) != std::string::npos; start = nul + 1)
    parts.push_back(input.substr(start, nul - start));
  parts.push_back(input.substr(start));
  parts.resize(3);
  return parts;
}

[[noreturn]] void escaped(const std::string& what, const std::string& path, const fs::path& folder) {
  throw std::logic_error(what + " '" + path + "' lies outside " + folder.string());
}

// Lexically (no file is looked at): `path` without "." or ".." parts escaping `folder`.
void expect_inside(const fs::path& folder, const std::string& path, const std::string& what) {
  const fs::path normal = fs::path(path).lexically_normal();
  const fs::path relative = normal.lexically_relative(folder.lexically_normal());
  if (relative.empty() || *relative.begin() == ".." || *relative.begin() == ".") escaped(what, path, folder);
  if (normal.string().rfind(folder.lexically_normal().string() + "/", 0) != 0) escaped(what, path, folder);
}

// A cache under the scratch directory, emptied for every input.
struct ScratchCache {
  explicit ScratchCache(const std::string& scratch)
      : scratch(scratch), root(fs::path(scratch) / "cache"), repo{RepoKind::Model, "org/model", "main"},
        cache(root.string(), repo) {
    fs::remove_all(root);
    fs::remove(fs::path(scratch) / kIndexName);
    fs::create_directories(root);
  }

  // What fetch_model and download_file do with a file whose HEAD was accepted, for real.
  void store(const std::string& commit, const std::string& path, const std::string& etag) const {
    for (const std::string& derived : {cache.blob_path(etag), cache.incomplete_path(etag), cache.lock_path(etag),
                                       cache.snapshot_dir(commit), cache.snapshot_file(commit, path)})
      expect_inside(root, derived, "a derived path");
    const FileLock lock(cache.lock_path(etag));
    const std::string incomplete = cache.incomplete_path(etag);
    fs::create_directories(fs::path(incomplete).parent_path());
    std::ofstream(incomplete) << "bytes";
    fs::rename(incomplete, cache.blob_path(etag));
    cache.link_snapshot_file(commit, path, etag);
  }

  // Nothing outside the cache; every link inside it points inside the repo's folder.
  void check_tree() const {
    for (const auto& entry : fs::directory_iterator(scratch)) {
      const std::string name = entry.path().filename().string();
      if (name != "cache" && name != kIndexName) escaped("a file written", entry.path().string(), root);
    }
    for (const auto& entry : fs::recursive_directory_iterator(root)) {
      if (!entry.is_symlink()) continue;
      const fs::path target = entry.path().parent_path() / fs::read_symlink(entry.path());
      expect_inside(cache.folder(), target.string(), "the target of the link " + entry.path().string());
    }
  }

  std::string scratch;
  fs::path root;
  RepoRef repo;
  RepoCache cache;
};

// The last HEAD answer, header line by header line as libcurl hands them over.
RemoteFileInfo read_head(const ScratchCache& scratch, const std::string& headers, const std::string& asked_commit,
                         const std::string& path) {
  HttpResponse response;
  response.status = 200;
  size_t start = 0;
  for (size_t end; (end = headers.find('\n', start)) != std::string::npos; start = end + 1)
    apply_header_line(headers.substr(start, end + 1 - start), response);
  apply_header_line(headers.substr(start), response);
  const std::string url = "https://huggingface.co/org/model/resolve/" + asked_commit + "/" + path;
  const bool redirect = response.status >= 300 && response.status < 400;
  if (!redirect && (response.status < 200 || response.status >= 300)) {
    throw Error("HTTP " + std::to_string(response.status));  // throw_for_status's part (the settings' token hint)
  }
  return file_info_from_head(scratch.repo, asked_commit, path, url, response);
}

void read_index(const ScratchCache& scratch, const std::string& index, const std::string& commit,
                const std::string& etag) {
  const std::string path = (fs::path(scratch.scratch) / kIndexName).string();
  std::ofstream(path, std::ios::binary) << index;
  for (const std::string& shard : shards_of_index(path)) scratch.store(commit, shard, etag);
}

// Runs `part`; a finetune::Error (a refusal) is kept in `first_refusal` and false returned.
bool accepted(const std::function<void()>& part, std::exception_ptr& first_refusal) {
  try {
    part();
    return true;
  } catch (const Error&) {
    if (!first_refusal) first_refusal = std::current_exception();
    return false;
  }
}

// The listing as fetch_model reads it, or as fetch_dataset does (the main branch's files or the
// Parquet export's); every snapshot path it could make.
void read_listing(const ScratchCache& scratch, const RepoInfo& info) {
  for (const std::string& file : info.files)
    expect_inside(scratch.root, scratch.cache.snapshot_file(info.commit, file), "a listed file");
  std::exception_ptr refusal;
  const bool as_model = accepted([&] { model_files_without_shards(scratch.repo.describe(), info.files); }, refusal);
  const bool as_dataset = accepted([&] { infer_listing_splits("dataset org/data", info.files); }, refusal);
  const bool as_export = accepted([&] { parquet_export_listing_splits("dataset org/data", info.files); }, refusal);
  if (!as_model && !as_dataset && !as_export) std::rethrow_exception(refusal);
}

}  // namespace

void run_hub_answers(const std::string& input, const std::string& scratch_dir) {
  const std::vector<std::string> parts = split_parts(input);
  const ScratchCache scratch(scratch_dir);
  std::exception_ptr refusal;
  RepoInfo info;
  const bool listed = accepted(
      [&] {
        info = repo_info_from_answer(scratch.repo, "https://huggingface.co/api/models/org/model/revision/main",
                                     parts[0]);
        read_listing(scratch, info);
      },
      refusal);
  // What fetch_file_info asks: the listed commit and one listed file.
  const std::string commit = listed ? info.commit : kAskedCommit;
  const std::string path = listed && !info.files.empty() ? info.files.front() : "config.json";
  RemoteFileInfo file;
  const bool headed = accepted(
      [&] {
        file = read_head(scratch, parts[1], commit, path);
        scratch.store(file.commit, file.path, file.etag);
        scratch.cache.write_ref(scratch.repo.revision, file.commit);
      },
      refusal);
  const bool indexed = accepted(
      [&] { read_index(scratch, parts[2], headed ? file.commit : commit, headed ? file.etag : "etag"); }, refusal);
  scratch.check_tree();
  if (!(listed && headed && indexed)) std::rethrow_exception(refusal);
}

}  // namespace finetune::fuzz
