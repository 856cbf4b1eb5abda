#include "finetune/util/path_status.h"

#include <system_error>

#include "finetune/util/errors.h"

namespace finetune {

namespace fs = std::filesystem;

fs::file_type file_type_at(const std::string& path, const std::string& what) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  // ENOENT and ENOTDIR come back as not_found; a failure to look at all as none (where the
  // throwing overload throws).
  if (status.type() == fs::file_type::none) {
    throw Error(path + ": cannot look at " + what + " (" + error.message() + ")");
  }
  return status.type();
}

bool is_regular_file_at(const std::string& path, const std::string& what) {
  return file_type_at(path, what) == fs::file_type::regular;
}

bool is_directory_at(const std::string& path, const std::string& what) {
  return file_type_at(path, what) == fs::file_type::directory;
}

bool exists_at(const std::string& path, const std::string& what) {
  return file_type_at(path, what) != fs::file_type::not_found;
}

}  // namespace finetune
