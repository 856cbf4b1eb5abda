// A directory that appears whole or not at all (Note [Atomic directories]): files are written into
// `<final>.tmp-<pid>/`, then commit() fsyncs every file and the directory and renames it to
// `<final>`. A crash before the rename leaves only a `.tmp-` directory, which
// remove_stale_temp_directories() deletes at the next start; `<final>` never exists half written.
#pragma once

#include <string>
#include <vector>

namespace finetune {

class AtomicDirectory {
 public:
  // Creates the temporary directory beside `final_path` (parents must exist). Errors name it.
  explicit AtomicDirectory(std::string final_path);
  ~AtomicDirectory();  // removes the temporary directory unless committed
  AtomicDirectory(const AtomicDirectory&) = delete;
  AtomicDirectory& operator=(const AtomicDirectory&) = delete;

  // Where to write the files.
  const std::string& path() const { return temp_path_; }
  // fsyncs the files and the directory, replaces `final_path` (an existing one is moved aside and
  // removed after the rename) and fsyncs the parent.
  void commit();

 private:
  std::string final_path_;
  std::string temp_path_;
  bool committed_ = false;
};

// The temporary (".tmp-<pid>") and moved-aside (".old-<pid>") directories and the temporary files
// of write_file_atomically (".tmp.<pid>") directly inside `parent` whose process no longer runs,
// removed; returns their names.
std::vector<std::string> remove_stale_temp_directories(const std::string& parent);

// Removes a directory (or file) so that it disappears whole: renamed to "<path>.old-<pid>" first
// (atomic), then deleted; a crash mid-way leaves only the ".old-" name, which
// remove_stale_temp_directories() finishes. Throws Error naming `path` when the rename fails.
void remove_atomically(const std::string& path);

// Removes a directory tree without std::filesystem::remove_all (which libtorch.so also exports,
// in a copy that crashes when a LibTorch binary resolves to it). Best effort; errors are ignored.
void remove_directory_tree(const std::string& path);

}  // namespace finetune
