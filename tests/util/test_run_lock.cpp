// One run per --output_dir (run_lock.h): the lock is exclusive between processes, names its holder
// (pid and host) to the one refused, and is released when its holder ends, however it ends.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>

#include "../test_support.h"
#include "finetune/util/errors.h"
#include "finetune/util/run_lock.h"

namespace finetune {
namespace {

using testing::TempDir;

std::string host_name() {
  char name[256] = {0};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// Runs `body` in a child process; its exit status (0 when body returns true).
int in_child(const std::function<bool()>& body) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(body() ? 0 : 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

bool refused_naming(const std::string& dir, const std::string& holder) {
  try {
    RunLock second(dir);
  } catch (const UsageError& e) {
    return std::string(e.what()).find(holder) != std::string::npos;
  }
  return false;
}

TEST(RunLock, CreatesTheDirectoryAndWritesItsHolder) {
  TempDir root;
  const std::string dir = root.file("out/run");
  const RunLock lock(dir);
  std::ifstream in(dir + "/" + kRunLockFile);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "pid " + std::to_string(::getpid()) + " host " + host_name());
}

TEST(RunLock, ASecondProcessIsRefusedNamingTheHolder) {
  TempDir root;
  const std::string dir = root.file("out");
  {
    const RunLock lock(dir);
    const std::string holder = "pid " + std::to_string(::getpid()) + " host " + host_name();
    EXPECT_EQ(in_child([&] { return refused_naming(dir, holder); }), 0);
    // flock conflicts between open files, so a second lock in this very process is refused too
    testing::expect_contains(testing::error_message([&] { RunLock again(dir); }),
                             {"--output_dir " + dir + " is in use by another finetune run", holder});
  }
  EXPECT_EQ(in_child([&] {  // released with its holder
              const RunLock lock(dir);
              return true;
            }),
            0);
}

TEST(RunLock, AHolderThatDiesReleasesIt) {
  TempDir root;
  const std::string dir = root.file("out");
  EXPECT_EQ(in_child([&] {
              new RunLock(dir);  // never released by a destructor: the process just ends
              ::_exit(0);
              return true;
            }),
            0);
  EXPECT_NO_THROW(RunLock again(dir));
}

TEST(RunLock, AnUnwritableDirectoryIsAnErrorWithTheReason) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories";
  TempDir root;
  ASSERT_EQ(::chmod(root.str().c_str(), 0555), 0);
  testing::expect_contains(testing::error_message([&] { RunLock lock(root.str()); }),
                           {"cannot create the lock file", "Permission denied"});
  ::chmod(root.str().c_str(), 0755);
}

}  // namespace
}  // namespace finetune
