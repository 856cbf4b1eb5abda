#include "finetune/hub/file_download.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "finetune/hub/cache_lookup.h"
#include "finetune/util/log.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;

int64_t header_size(const HttpResponse& response, const std::string& name) {
  const std::string text = response.header(name);
  if (text.empty()) return -1;
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    return -1;
  }
}

bool is_redirect(long status) { return status == 301 || status == 302 || status == 303 || status == 307 || status == 308; }

// scheme://host[:port] of a URL, to which a relative Location refers.
std::string origin_of(const std::string& url) {
  const auto scheme_end = url.find("://");
  const auto path_start = url.find('/', scheme_end == std::string::npos ? 0 : scheme_end + 3);
  return path_start == std::string::npos ? url : url.substr(0, path_start);
}

int64_t file_size_or_zero(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(size);
}

// The .incomplete file, appended to (or started over); a failed write (disk full) is an Error
// naming the file, and the partial file stays for the next attempt to resume.
class PartFile {
 public:
  PartFile(const std::string& path, bool start_over)
      : path_(path), file_(std::fopen(path.c_str(), start_over ? "wb" : "ab"), std::fclose) {
    if (!file_) throw Error(path + ": cannot open for writing: " + std::strerror(errno));
  }
  void write(const char* data, size_t size) {
    if (std::fwrite(data, 1, size, file_.get()) != size) fail();
  }
  void close() {
    if (std::fflush(file_.get()) != 0 || ::fsync(::fileno(file_.get())) != 0) fail();
    file_.reset();
  }

 private:
  [[noreturn]] void fail() {
    throw Error(path_ + ": cannot write: " + std::strerror(errno) +
                " (the partial file stays; the download resumes from it next time)");
  }
  std::string path_;
  std::unique_ptr<std::FILE, decltype(&std::fclose)> file_;
};

// The error for a body longer than the HEAD announced (the partial file is then removed).
TransportError longer_than_announced(const RemoteFileInfo& file, int64_t received) {
  return TransportError(TransportError::Kind::TooLarge,
                        "the download makes the file at least " + std::to_string(received) + " bytes, larger than the " +
                            std::to_string(file.size) + " bytes the hub announced for it");
}

// One GET of what the .incomplete file lacks. Returns when the server sent all it meant to;
// throws TransportError when the connection failed midway (the bytes received stay), or TooLarge
// as soon as the file would grow past the announced size.
void fetch_rest(const HubSettings& settings, const RepoRef& repo, const RemoteFileInfo& file,
                const std::string& incomplete, std::atomic<int64_t>& bytes_done, const std::atomic<bool>& stop) {
  const int64_t have = file_size_or_zero(incomplete);
  if (have >= file.size) return;
  HttpRequest request = hub_request(settings, "GET", file.download_url);
  request.follow_redirects = true;
  request.stall_timeout_s = settings.download_timeout_s;
  request.deadline_s = download_deadline_s(settings, file.size - have);
  request.max_body_bytes = file.size;  // a 206 sends less; a 200 (Range ignored) the whole file
  request.headers.emplace_back("Accept-Encoding", "identity");
  if (have > 0) request.headers.emplace_back("Range", "bytes=" + std::to_string(have) + "-");
  std::unique_ptr<PartFile> part;
  int64_t file_bytes = 0;  // the size the .incomplete file has now
  HttpResponse response;
  try {
    response = http_request(request, [&](const HttpResponse& head, const char* data, size_t size) {
      if (stop.load()) return false;
      if (!part) {
        const bool start_over = head.status != 206;  // a server that ignored Range sends it all again
        if (start_over && have > 0) bytes_done -= have;
        file_bytes = start_over ? 0 : have;
        part = std::make_unique<PartFile>(incomplete, start_over);
      }
      file_bytes += static_cast<int64_t>(size);
      if (file_bytes > file.size) throw longer_than_announced(file, file_bytes);
      part->write(data, size);
      bytes_done += static_cast<int64_t>(size);
      return true;
    });
  } catch (const TransportError& e) {
    if (e.kind != TransportError::Kind::TooLarge || file_bytes > file.size) throw;
    // the transfer's own bound (max_body_bytes) stopped it
    throw TransportError(e.kind, "the download is larger than the " + std::to_string(file.size) +
                                     " bytes the hub announced for it: " + e.what());
  }
  if (part) part->close();
  if (response.status == 416) return;  // nothing left to send: the size check decides
  if (response.status < 200 || response.status >= 300) throw_for_status(response, settings, repo, file.path);
}

// Throws unless the HEAD's answer can name files in the cache: a commit id (40 lowercase hex,
// the one asked for), an ETag usable as a file name, a size, an http(s) location.
void check_file_info(const RepoRef& repo, const std::string& asked_commit, const RemoteFileInfo& info) {
  const std::string what = repo.describe(info.path) + ": the hub answered ";
  if (!is_commit_hash(info.commit)) {
    throw Error(what + "the commit id (X-Repo-Commit) '" + info.commit +
                "', which is not 40 lowercase hex digits; refusing to write it into the cache");
  }
  if (is_commit_hash(asked_commit) && info.commit != asked_commit) {
    throw Error(what + "commit " + info.commit + " for a request of commit " + asked_commit);
  }
  if (!is_safe_blob_name(info.etag)) {
    throw Error(what + "the ETag '" + info.etag + "', which is not usable as a blob file name; the file cannot be "
                "cached as huggingface_hub caches it");
  }
  if (info.size < 0) {
    throw Error(what + "no size (X-Linked-Size or Content-Length); as huggingface_hub, finetune does not download a "
                "file of unknown size");
  }
  if (info.download_url.rfind("http://", 0) != 0 && info.download_url.rfind("https://", 0) != 0) {
    throw Error(what + "a redirect to '" + info.download_url + "', which is not an http:// or https:// URL");
  }
}

}  // namespace

RemoteFileInfo fetch_file_info(const HubSettings& settings, const RepoRef& repo, const std::string& commit,
                               const std::string& path) {
  std::string url = resolve_url(settings, repo, commit, path);
  HttpResponse response;
  for (int hop = 0;; ++hop) {
    HttpRequest request = metadata_request(settings, "HEAD", url);
    request.headers.emplace_back("Accept-Encoding", "identity");
    try {
      response = http_request(request);
    } catch (const TransportError& e) {
      throw_transport(e, repo, path);
    }
    const std::string location = response.header("location");
    // A relative redirect is the hub's own (a renamed repo): follow it. An absolute one points at
    // the CDN holding the bytes: its headers already say what they are.
    if (!is_redirect(response.status) || location.empty() || location.front() != '/' || hop == 10) break;
    url = origin_of(url) + location;
  }
  if (!is_redirect(response.status) && (response.status < 200 || response.status >= 300)) {
    throw_for_status(response, settings, repo, path);
  }
  return file_info_from_head(repo, commit, path, url, response);
}

RemoteFileInfo file_info_from_head(const RepoRef& repo, const std::string& commit, const std::string& path,
                                   const std::string& url, const HttpResponse& response) {
  RemoteFileInfo info;
  info.path = path;
  info.commit = response.header("x-repo-commit");
  const std::string linked_etag = response.header("x-linked-etag");
  info.etag = normalize_etag(linked_etag.empty() ? response.header("etag") : linked_etag);
  info.size = header_size(response, "x-linked-size");
  if (info.size < 0) info.size = header_size(response, "content-length");
  info.download_url = is_redirect(response.status) ? response.header("location") : url;
  if (info.commit.empty()) info.commit = commit;
  check_file_info(repo, commit, info);
  return info;
}

bool blob_cached(const RepoCache& cache, const RemoteFileInfo& file) {
  std::error_code ec;
  const auto blob = cache.blob_path(file.etag);
  return fs::is_regular_file(blob, ec) && file_size_or_zero(blob) == file.size;
}

void download_file(const HubSettings& settings, const RepoRef& repo, const RepoCache& cache,
                   const RemoteFileInfo& file, std::atomic<int64_t>& bytes_done, const std::atomic<bool>& stop) {
  const FileLock lock(cache.lock_path(file.etag));  // one writer per blob on this node
  if (!blob_cached(cache, file)) {
    const std::string incomplete = cache.incomplete_path(file.etag);
    fs::create_directories(fs::path(incomplete).parent_path());
    const int64_t resumed = file_size_or_zero(incomplete);
    if (resumed > 0) log::info(repo.describe(file.path) + ": resuming from byte " + std::to_string(resumed));
    bytes_done += resumed;
    for (int attempt = 1;; ++attempt) {
      try {
        fetch_rest(settings, repo, file, incomplete, bytes_done, stop);
        const int64_t have = file_size_or_zero(incomplete);
        if (have == file.size) break;
        if (have > file.size) throw longer_than_announced(file, have);
        throw TransportError(TransportError::Kind::Truncated, "the connection ended after " + std::to_string(have) +
                                                                  " of " + std::to_string(file.size) + " bytes");
      } catch (const TransportError& e) {
        if (e.kind == TransportError::Kind::TooLarge) {
          std::error_code ec;
          fs::remove(incomplete, ec);
          throw_transport(TransportError(e.kind, std::string(e.what()) + "; the partial file was removed"), repo,
                          file.path);
        }
        if (stop.load() || attempt == kDownloadAttempts || !worth_retrying(e)) throw_transport(e, repo, file.path);
        log::warn(repo.describe(file.path) + ": " + e.what() + "; resuming (attempt " + std::to_string(attempt + 1) +
                  " of " + std::to_string(kDownloadAttempts) + ")");
      }
    }
    std::error_code ec;
    fs::rename(incomplete, cache.blob_path(file.etag), ec);
    if (ec) throw Error(cache.blob_path(file.etag) + ": cannot move the finished download into place: " + ec.message());
  }
  cache.link_snapshot_file(file.commit, file.path, file.etag);
}

}  // namespace finetune
