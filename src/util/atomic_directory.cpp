#include "finetune/util/atomic_directory.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "finetune/util/errors.h"

namespace finetune {
namespace {

// Note [Atomic directories]
// rename(2) of a directory is atomic, so readers see either no `<final>` or the complete one.
// Durability needs every file's data on disk before the rename (fsync each file), the temporary
// directory's entries on disk (fsync it), and the rename itself (fsync the parent). A directory
// cannot be renamed over a non-empty one, so an existing `<final>` is first renamed to
// `<final>.old-<pid>`; a crash between the two renames leaves that `.old-` directory, which the
// next start removes like a `.tmp-` one.

const char* const kTempMarker = ".tmp-";
const char* const kOldMarker = ".old-";
const char* const kTempFileMarker = ".tmp.";  // write_file_atomically's temporary files

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open for fsync: " + std::strerror(errno));
  // Some filesystems refuse fsync on directories (EINVAL): the rename is still atomic there.
  if (::fsync(fd) != 0 && !(directory && errno == EINVAL)) {
    const std::string reason = std::strerror(errno);
    ::close(fd);
    throw Error(path + ": fsync failed: " + reason);
  }
  ::close(fd);
}

std::string parent_of(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

bool process_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

}  // namespace

void remove_directory_tree(const std::string& path) {
  ::nftw(path.c_str(), [](const char* entry, const struct stat*, int, struct FTW*) { return ::remove(entry); }, 16,
         FTW_DEPTH | FTW_PHYS);
}

void remove_atomically(const std::string& path) {
  const std::string doomed = path + kOldMarker + std::to_string(::getpid());
  remove_directory_tree(doomed);
  if (::rename(path.c_str(), doomed.c_str()) != 0) {
    throw Error(path + ": cannot remove (rename to '" + doomed + "' failed: " + std::strerror(errno) + ")");
  }
  remove_directory_tree(doomed);
}

AtomicDirectory::AtomicDirectory(std::string final_path)
    : final_path_(std::move(final_path)), temp_path_(final_path_ + kTempMarker + std::to_string(::getpid())) {
  remove_directory_tree(temp_path_);  // a leftover of an earlier attempt by this very process
  if (::mkdir(temp_path_.c_str(), 0755) != 0) {
    throw Error(final_path_ + ": cannot create '" + temp_path_ + "': " + std::strerror(errno));
  }
}

AtomicDirectory::~AtomicDirectory() {
  if (!committed_) remove_directory_tree(temp_path_);
}

void AtomicDirectory::commit() {
  DIR* dir = ::opendir(temp_path_.c_str());
  if (dir == nullptr) throw Error(temp_path_ + ": cannot list: " + std::strerror(errno));
  std::vector<std::string> files;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") files.push_back(temp_path_ + "/" + name);
  }
  ::closedir(dir);
  for (const auto& file : files) fsync_path(file, false);
  fsync_path(temp_path_, true);
  const std::string old_path = final_path_ + kOldMarker + std::to_string(::getpid());
  struct stat existing {};
  const bool replacing = ::stat(final_path_.c_str(), &existing) == 0;
  if (replacing && ::rename(final_path_.c_str(), old_path.c_str()) != 0) {
    throw Error(final_path_ + ": cannot move the existing directory aside: " + std::strerror(errno));
  }
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    if (replacing) ::rename(old_path.c_str(), final_path_.c_str());
    throw Error(final_path_ + ": cannot rename '" + temp_path_ + "' into place: " + reason);
  }
  committed_ = true;
  fsync_path(parent_of(final_path_), true);
  if (replacing) remove_directory_tree(old_path);
}

std::vector<std::string> remove_stale_temp_directories(const std::string& parent) {
  std::vector<std::string> removed;
  DIR* dir = ::opendir(parent.c_str());
  if (dir == nullptr) return removed;
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir)) names.emplace_back(entry->d_name);
  ::closedir(dir);
  for (const auto& name : names) {
    for (const char* marker : {kTempMarker, kOldMarker, kTempFileMarker}) {
      const auto at = name.rfind(marker);
      if (at == std::string::npos || at == 0) continue;
      const std::string digits = name.substr(at + std::strlen(marker));
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
      const long pid = std::stol(digits);
      if (process_alive(pid) && pid != static_cast<long>(::getpid())) continue;
      remove_directory_tree(parent + "/" + name);
      removed.push_back(name);
    }
  }
  return removed;
}

}  // namespace finetune
