// One file of a hub repo into the cache, as huggingface_hub's hf_hub_download does it:
//   1. HEAD the resolve URL (following relative redirects: a renamed repo): the ETag (X-Linked-Etag
//      for LFS files), the size (X-Linked-Size / Content-Length), the commit (X-Repo-Commit), and
//      where the bytes are (the Location of a redirect to a CDN, else the resolve URL);
//   2. a blob with that ETag already cached: only the snapshot link is made;
//   3. otherwise, under the blob's lock: GET into blobs/<etag>.incomplete, resuming an existing
//      partial file with Range, retried (resuming) when the connection drops, then the size checked
//      and the file renamed to blobs/<etag>.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "finetune/hub/hub_api.h"
#include "finetune/hub/hub_cache.h"

namespace finetune {

struct RemoteFileInfo {
  std::string path;
  std::string etag;          // normalised
  std::string commit;
  int64_t size = -1;         // -1: the server did not say
  std::string download_url;  // the CDN location, or the resolve URL
};

RemoteFileInfo fetch_file_info(const HubSettings& settings, const RepoRef& repo, const std::string& commit,
                               const std::string& path);
// fetch_file_info's reading of the last HEAD answer (a 2xx or a redirect, from `url`): throws
// unless it names a commit id (40 lowercase hex, the one asked for when `commit` is one), an ETag
// usable as a blob file name, a size, and an http(s) location for the bytes.
RemoteFileInfo file_info_from_head(const RepoRef& repo, const std::string& commit, const std::string& path,
                                   const std::string& url, const HttpResponse& response);

// True when the blob is already complete in the cache (nothing to download).
bool blob_cached(const RepoCache& cache, const RemoteFileInfo& file);

// Downloads (or resumes) the blob and links snapshots/<commit>/<path>. `bytes_done` grows with
// every byte written (for the progress bar); `stop` set by another thread aborts the transfer.
void download_file(const HubSettings& settings, const RepoRef& repo, const RepoCache& cache,
                   const RemoteFileInfo& file, std::atomic<int64_t>& bytes_done, const std::atomic<bool>& stop);

// Connection drops a download survives (each resumes where the last stopped), as huggingface_hub.
inline constexpr int kDownloadAttempts = 5;

}  // namespace finetune
