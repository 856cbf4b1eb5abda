#include "finetune/util/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "finetune/util/errors.h"
#include "finetune/util/output_directory.h"

namespace finetune {
namespace {

std::string host_name() {
  char name[256] = {0};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("unknown host");
}

// What the holder wrote ("pid N host H"), at most a line.
std::string holder_of(int fd) {
  char text[512] = {0};
  const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
  std::string holder = got > 0 ? std::string(text, static_cast<size_t>(got)) : "";
  const auto newline = holder.find('\n');
  if (newline != std::string::npos) holder.resize(newline);
  return holder.empty() ? "a process that has not written its name yet" : holder;
}

}  // namespace

RunLock::RunLock(const std::string& output_dir) {
  create_output_directory(output_dir, "--output_dir");
  const std::string path = output_dir + "/" + kRunLockFile;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("--output_dir " + output_dir + ": cannot create the lock file " + path + ": " + std::strerror(errno));
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    const int error = errno;
    const std::string holder = error == EWOULDBLOCK ? holder_of(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (error != EWOULDBLOCK) throw Error(path + ": cannot lock: " + std::strerror(error));
    throw UsageError("--output_dir " + output_dir + " is in use by another finetune run (" + holder + ", holding " +
                     path + "); wait for it to end or choose another --output_dir");
  }
  const std::string me = "pid " + std::to_string(::getpid()) + " host " + host_name() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const std::string reason = std::strerror(errno);
    ::close(fd_);
    throw Error(path + ": cannot write the lock holder: " + reason);
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace finetune
