#include "finetune/hub/hub_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "finetune/config/hf_hub.h"
#include "finetune/util/atomic_file.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;

void make_directories(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create the cache directory: " + ec.message());
}

}  // namespace

RepoCache::RepoCache(const std::string& cache_root, const RepoRef& repo) : root_(cache_root) {
  if (cache_root.empty()) throw Error("no Hugging Face cache directory: set HF_HUB_CACHE or HF_HOME (HOME is unset)");
  folder_ = repo_cache_folder(cache_root, repo.id, repo.cache_kind());
}

std::string RepoCache::blob_path(const std::string& etag) const { return folder_ + "/blobs/" + etag; }
std::string RepoCache::incomplete_path(const std::string& etag) const { return blob_path(etag) + ".incomplete"; }
std::string RepoCache::lock_path(const std::string& etag) const {
  return (fs::path(root_) / ".locks" / fs::path(folder_).filename() / (etag + ".lock")).string();
}
std::string RepoCache::snapshot_dir(const std::string& commit) const { return folder_ + "/snapshots/" + commit; }
std::string RepoCache::snapshot_file(const std::string& commit, const std::string& path) const {
  return snapshot_dir(commit) + "/" + path;
}

void RepoCache::link_snapshot_file(const std::string& commit, const std::string& path, const std::string& etag) const {
  const fs::path pointer = snapshot_file(commit, path);
  make_directories(pointer.parent_path());
  const fs::path target = fs::path(blob_path(etag)).lexically_relative(pointer.parent_path());
  const fs::path temporary = pointer.string() + ".tmp-link-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove(temporary, ec);
  fs::create_symlink(target, temporary, ec);
  if (!ec) fs::rename(temporary, pointer, ec);
  if (ec) {
    fs::remove(temporary);
    throw Error(pointer.string() + ": cannot link the snapshot file to its blob: " + ec.message());
  }
}

void RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return;
  const fs::path ref = fs::path(folder_) / "refs" / revision;
  make_directories(ref.parent_path());
  write_file_atomically(ref.string(), commit);
}

FileLock::FileLock(const std::string& path) {
  make_directories(fs::path(path).parent_path());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(path + ": cannot open the lock file: " + std::strerror(errno));
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      const std::string reason = std::strerror(errno);
      ::close(fd_);
      throw Error(path + ": cannot lock: " + reason);
    }
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

std::string normalize_etag(const std::string& etag) {
  std::string out = etag;
  if (out.rfind("W/", 0) == 0) out = out.substr(2);
  if (out.size() >= 2 && out.front() == '"' && out.back() == '"') out = out.substr(1, out.size() - 2);
  return out;
}

}  // namespace finetune
