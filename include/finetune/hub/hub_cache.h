// Writing into the Hugging Face cache exactly as huggingface_hub lays it out, so that transformers
// and huggingface_hub use what finetune downloads and finetune uses what they did:
//   <root>/models--ORG--NAME/blobs/<etag>                 the bytes, named by the file's ETag
//                            blobs/<etag>.incomplete      a download under way (resumed by Range)
//                            snapshots/<commit>/<path>    relative symlink to ../../blobs/<etag>
//                            refs/<revision>              the commit of a branch or tag
//   <root>/.locks/models--ORG--NAME/<etag>.lock           held while a blob is being written
// A blob appears under its final name only complete (rename of the checked .incomplete file), and
// a snapshot entry only after its blob, so a killed download never leaves a file looking complete.
// Every name here may come from a server's answer (ETag, X-Repo-Commit, a listing), so each is
// checked before any path is built from it: an ETag must be a plain file name (is_safe_blob_name),
// a commit 40 lowercase hex digits, a file path or ref repo-relative without "." or ".." parts,
// and the joined path must stay inside the repo's cache folder; anything else is an Error.
#pragma once

#include <cstddef>
#include <string>

#include "finetune/hub/hub_api.h"

namespace finetune {

class RepoCache {
 public:
  RepoCache(const std::string& cache_root, const RepoRef& repo);

  const std::string& folder() const { return folder_; }
  std::string blob_path(const std::string& etag) const;
  std::string incomplete_path(const std::string& etag) const;
  std::string lock_path(const std::string& etag) const;
  std::string snapshot_dir(const std::string& commit) const;
  std::string snapshot_file(const std::string& commit, const std::string& path) const;

  // snapshots/<commit>/<path> -> the blob (relative symlink, replaced atomically).
  void link_snapshot_file(const std::string& commit, const std::string& path, const std::string& etag) const;
  // refs/<revision> = commit (not for a revision that is itself the commit).
  void write_ref(const std::string& revision, const std::string& commit) const;

 private:
  std::string root_;
  std::string folder_;
};

// An exclusive lock on a file (flock), released when this object goes. Other processes of this
// node, and huggingface_hub's own filelock, wait for it.
class FileLock {
 public:
  explicit FileLock(const std::string& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// An ETag usable as a file name under blobs/: 1 to kMaxBlobNameBytes of [A-Za-z0-9._+=-], not
// starting with '.'. The bound leaves room for ".incomplete" in a 255-byte file name (NAME_MAX);
// the hub's ETags are 40 (git) or 64 (sha256) hex digits.
inline constexpr size_t kMaxBlobNameBytes = 255 - sizeof(".incomplete") + 1;
bool is_safe_blob_name(const std::string& etag);

// The cache's spelling of an ETag: without W/ and quotes.
std::string normalize_etag(const std::string& etag);

}  // namespace finetune
