#include "finetune/util/output_directory.h"

#include <filesystem>
#include <system_error>

#include "finetune/util/errors.h"

namespace finetune {
namespace fs = std::filesystem;

namespace {

// The nearest existing ancestor of `path` (or `path` itself) when it is not a directory: the
// usual reason a directory cannot be created. Empty when there is none.
fs::path blocking_non_directory(const fs::path& path) {
  std::error_code ec;
  for (fs::path p = path; !p.empty(); p = p.parent_path()) {
    const auto status = fs::status(p, ec);
    if (fs::exists(status)) return fs::is_directory(status) ? fs::path() : p;
    if (p == p.parent_path()) break;  // the root
  }
  return {};
}

}  // namespace

void create_output_directory(const std::string& path, const std::string& what) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (!ec && fs::is_directory(path, ec)) return;
  const fs::path blocker = blocking_non_directory(path);
  const std::string reason = !blocker.empty() ? "'" + blocker.string() + "' exists and is not a directory"
                             : ec             ? ec.message()
                                              : "not a directory";
  throw Error(what + " '" + path + "': cannot create the directory (" + reason + ")");
}

}  // namespace finetune
