#include "finetune/util/atomic_file.h"
#include "finetune/util/file_contents.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "finetune/util/errors.h"

namespace finetune {
namespace {

void write_all(int fd, const void* data, size_t size, const std::string& tmp_path) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd, bytes, std::min<size_t>(size, size_t{1} << 30));
    if (written < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot write '" + tmp_path + "': " + std::strerror(errno));
    }
    bytes += written;
    size -= static_cast<size_t>(written);
  }
}

}  // namespace

void sync_parent_dir(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  const int fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_atomically(const std::string& path, const std::function<void(const AppendBytes&)>& write_contents) {
  const std::string tmp_path = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot create '" + tmp_path + "': " + std::strerror(errno));
  bool closed = false;
  const auto discard = [&] {
    if (!closed) ::close(fd);
    ::unlink(tmp_path.c_str());
  };
  try {
    write_contents([&](const void* data, size_t size) { write_all(fd, data, size, tmp_path); });
    if (::fsync(fd) != 0) throw Error("cannot fsync '" + tmp_path + "': " + std::strerror(errno));
    closed = true;  // even a failed close releases the descriptor
    if (::close(fd) != 0) throw Error("cannot close '" + tmp_path + "': " + std::strerror(errno));
  } catch (const Error& e) {
    discard();
    throw Error(path + ": " + e.what());
  } catch (...) {
    discard();
    throw;
  }
  if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp_path.c_str());
    throw Error(path + ": cannot rename '" + tmp_path + "' into place: " + reason);
  }
  sync_parent_dir(path);
}

void write_parts_atomically(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts) {
  write_atomically(path, [&](const AppendBytes& append) {
    for (const auto& [data, size] : parts) append(data, size);
  });
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  write_parts_atomically(path, {{contents.data(), contents.size()}});
}

void copy_file_atomically(const std::string& from, const std::string& to) {
  write_file_atomically(to, read_file(from, "for copying"));
}

}  // namespace finetune
