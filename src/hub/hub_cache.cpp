#include "finetune/hub/hub_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "finetune/hub/cache_lookup.h"
#include "finetune/util/atomic_file.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;

// Throws unless `path` stays inside `folder` once "." and ".." are resolved lexically.
void require_inside(const std::string& folder, const std::string& path, const std::string& what) {
  const fs::path relative = fs::path(path).lexically_normal().lexically_relative(fs::path(folder).lexically_normal());
  if (relative.empty() || *relative.begin() == "..") {
    throw Error(path + ": " + what + " would lie outside the cache folder " + folder + "; refusing to write it");
  }
}

void require_safe_blob_name(const std::string& folder, const std::string& etag) {
  if (!is_safe_blob_name(etag)) {
    throw Error(folder + ": the ETag '" + etag + "' is not a safe blob file name; refusing to write it into the cache");
  }
}

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

std::string RepoCache::blob_path(const std::string& etag) const {
  require_safe_blob_name(folder_, etag);
  return folder_ + "/blobs/" + etag;
}
std::string RepoCache::incomplete_path(const std::string& etag) const { return blob_path(etag) + ".incomplete"; }
std::string RepoCache::lock_path(const std::string& etag) const {
  require_safe_blob_name(folder_, etag);
  return (fs::path(root_) / ".locks" / fs::path(folder_).filename() / (etag + ".lock")).string();
}
std::string RepoCache::snapshot_dir(const std::string& commit) const {
  if (!is_commit_hash(commit)) {
    throw Error(folder_ + ": '" + commit + "' is not a commit id (40 lowercase hex digits); refusing to use it as a "
                "snapshot folder");
  }
  return folder_ + "/snapshots/" + commit;
}
std::string RepoCache::snapshot_file(const std::string& commit, const std::string& path) const {
  if (!is_repo_relative_path(path)) {
    throw Error(folder_ + ": '" + path + "' is not a path inside a repo; refusing to write it into the cache");
  }
  std::string file = snapshot_dir(commit) + "/" + path;
  require_inside(folder_, file, "the snapshot file");
  return file;
}

void RepoCache::link_snapshot_file(const std::string& commit, const std::string& path, const std::string& etag) const {
  const fs::path pointer = snapshot_file(commit, path);
  const fs::path blob = blob_path(etag);  // checked before anything is created
  make_directories(pointer.parent_path());
  const fs::path target = blob.lexically_relative(pointer.parent_path());
  const fs::path temporary = pointer.string() + ".tmp-link-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove(temporary, ec);
  fs::create_symlink(target, temporary, ec);
  if (!ec) fs::rename(temporary, pointer, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw Error(pointer.string() + ": cannot link the snapshot file to its blob: " + ec.message());
  }
}

void RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return;
  if (!is_commit_hash(commit)) {
    throw Error(folder_ + ": '" + commit + "' is not a commit id; refusing to write it into refs/" + revision);
  }
  if (!is_repo_relative_path(revision)) {
    throw Error(folder_ + ": the revision '" + revision + "' is not a safe ref name; refusing to write it into the cache");
  }
  const fs::path ref = fs::path(folder_) / "refs" / revision;
  require_inside(folder_, ref.string(), "the ref");
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

bool is_safe_blob_name(const std::string& etag) {
  if (etag.empty() || etag.size() > kMaxBlobNameBytes || etag.front() == '.') return false;
  for (const char c : etag) {
    const bool allowed = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '+' ||
                         c == '=';
    if (!allowed) return false;
  }
  return true;
}

std::string normalize_etag(const std::string& etag) {
  std::string out = etag;
  if (out.rfind("W/", 0) == 0) out = out.substr(2);
  if (out.size() >= 2 && out.front() == '"' && out.back() == '"') out = out.substr(1, out.size() - 2);
  return out;
}

}  // namespace finetune
