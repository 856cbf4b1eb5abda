// The hub's read API, as huggingface_hub speaks it:
//   repo info   GET {endpoint}/api/{models|datasets}/{id}/revision/{revision}: the commit and files
//   a file      {endpoint}/{id}/resolve/{revision}/{path} (datasets: /datasets/{id}/resolve/...):
//               200 with the bytes, or a redirect to a CDN for large (LFS) files; headers
//               X-Repo-Commit, ETag / X-Linked-Etag, Content-Length / X-Linked-Size
// Every failure is an Error naming the repo, the revision and the file, one line, with what to do
// (a token for a gated repo, the id or revision that does not exist).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "finetune/hub/hub_settings.h"
#include "finetune/hub/http_client.h"

namespace finetune {

enum class RepoKind { Model, Dataset };

struct RepoRef {
  RepoKind kind = RepoKind::Model;
  std::string id;                  // ORG/NAME
  std::string revision = "main";   // branch, tag or commit

  std::string kind_name() const;   // "model" / "dataset"
  std::string cache_kind() const;  // "models" / "datasets" (cache folder and API path)
  // "model Qwen/Qwen3-8B (revision main)", and with a file: "..., file config.json"
  std::string describe(const std::string& file = "") const;
};

struct RepoInfo {
  std::string commit;               // the revision's commit ("sha")
  std::vector<std::string> files;   // every file of that commit ("siblings"), repo-relative
};

std::string api_url(const HubSettings& settings, const RepoRef& repo);
std::string resolve_url(const HubSettings& settings, const RepoRef& repo, const std::string& revision,
                        const std::string& path);

// A request with the token (when there is one) and the metadata timeout.
HttpRequest hub_request(const HubSettings& settings, const std::string& method, const std::string& url);
// hub_request bounded as a metadata request: the metadata deadline (hub_settings.h), and a body
// kept in memory (at most kMaxInMemoryBody).
HttpRequest metadata_request(const HubSettings& settings, const std::string& method, const std::string& url);

// Whether a download is tried again (resuming) after this failure: not after a deadline or an
// oversized answer, which the same server repeats.
bool worth_retrying(const TransportError& error);

// Throws when the answer is not repo info, or names a file that is not a plain repo-relative path
// (absolute, with "." or ".." parts, empty parts or a backslash): it would land outside the cache.
RepoInfo fetch_repo_info(const HubSettings& settings, const RepoRef& repo);
// fetch_repo_info's reading of a 2xx answer's body (fetched from `url`), with the same checks.
RepoInfo repo_info_from_answer(const RepoRef& repo, const std::string& url, const std::string& body);

// A path a repo can hold: relative, "/"-separated, no empty, "." or ".." part, no backslash or NUL,
// and one a file system can hold: parts of at most 255 bytes (NAME_MAX), the whole at most 4096
// (PATH_MAX). The bound also caps what reads a listing's names (split inference, glob matching)
// spends on a hub's 40 KB name (found by the hub_answers fuzz target).
inline constexpr size_t kMaxRepoPathPartBytes = 255;
inline constexpr size_t kMaxRepoPathBytes = 4096;
bool is_repo_relative_path(const std::string& path);

// Throws the Error for a non-2xx answer about `repo` (and `file`, when not empty).
[[noreturn]] void throw_for_status(const HttpResponse& response, const HubSettings& settings, const RepoRef& repo,
                                   const std::string& file);

// Transport errors get the same context: "model X (revision main, file F): connection reset (...)".
[[noreturn]] void throw_transport(const TransportError& error, const RepoRef& repo, const std::string& file);

}  // namespace finetune
