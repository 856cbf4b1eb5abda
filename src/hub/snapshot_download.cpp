#include "finetune/hub/snapshot_download.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "finetune/hub/file_download.h"
#include "finetune/hub/hub_cache.h"
#include "finetune/hub/progress_bar.h"
#include "finetune/util/log.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;

// Runs work(i) for i in [0, count) on up to `workers` threads. The first exception sets `stop`
// (so that running transfers end early), later items are not started, and it is rethrown.
void parallel_for(size_t count, int workers, std::atomic<bool>& stop, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::exception_ptr first_error;
  const auto worker = [&] {
    for (size_t i = next++; i < count && !stop.load(); i = next++) {
      try {
        work(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first_error) first_error = std::current_exception();
        stop = true;
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t thread_count = std::min<size_t>(count, static_cast<size_t>(std::max(1, workers)));
  for (size_t t = 1; t < thread_count; ++t) threads.emplace_back(worker);
  worker();
  for (auto& thread : threads) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

bool snapshot_has(const RepoCache& cache, const std::string& commit, const std::string& path) {
  std::error_code ec;
  return fs::exists(cache.snapshot_file(commit, path), ec);  // follows the link: its blob is there
}

}  // namespace

std::string download_snapshot(const HubSettings& settings, const RepoRef& repo, const std::string& commit,
                              const std::vector<std::string>& files) {
  const RepoCache cache(settings.cache_root, repo);
  std::vector<std::string> missing;
  for (const auto& path : files)
    if (!snapshot_has(cache, commit, path)) missing.push_back(path);

  std::atomic<bool> stop{false};
  std::vector<std::optional<RemoteFileInfo>> infos(missing.size());
  parallel_for(missing.size(), settings.max_workers, stop,
               [&](size_t i) { infos[i] = fetch_file_info(settings, repo, commit, missing[i]); });
  int64_t total = 0;
  std::vector<RemoteFileInfo> to_fetch;
  for (const auto& info : infos) {
    if (blob_cached(cache, *info)) {
      cache.link_snapshot_file(info->commit, info->path, info->etag);
    } else {
      to_fetch.push_back(*info);
      total += std::max<int64_t>(info->size, 0);
    }
  }
  if (!to_fetch.empty()) {
    log::info("downloading " + std::to_string(to_fetch.size()) + " file" + (to_fetch.size() == 1 ? "" : "s") +
              " of " + repo.describe() + " (" + human_bytes(static_cast<double>(total)) + ") into " + cache.folder());
    std::atomic<int64_t> bytes_done{0};
    {
      const ProgressBar bar(repo.id, total, bytes_done, ::isatty(STDERR_FILENO) == 1);
      parallel_for(to_fetch.size(), settings.max_workers, stop,
                   [&](size_t i) { download_file(settings, repo, cache, to_fetch[i], bytes_done, stop); });
    }
  }
  cache.write_ref(repo.revision, commit);
  return cache.snapshot_dir(commit);
}

}  // namespace finetune
