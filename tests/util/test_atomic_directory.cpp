// AtomicDirectory: the final directory appears only on commit, whole; uncommitted or crashed
// attempts leave only temporary directories, which the next start removes.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../test_support.h"
#include "finetune/util/atomic_directory.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A pid that certainly ran and certainly exited.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

TEST(AtomicDirectory, AppearsOnlyOnCommit) {
  TempDir root;
  const auto target = root.file("checkpoint-3");
  {
    AtomicDirectory staged(target);
    EXPECT_NE(staged.path(), target);
    std::ofstream(staged.path() + "/a.txt") << "alpha";
    EXPECT_FALSE(fs::exists(target));
    staged.commit();
  }
  EXPECT_EQ(read(target + "/a.txt"), "alpha");
  EXPECT_EQ(std::distance(fs::directory_iterator(root.path()), fs::directory_iterator{}), 1);  // no temp left
}

TEST(AtomicDirectory, AnUncommittedAttemptLeavesNothing) {
  TempDir root;
  const auto target = root.file("checkpoint-4");
  {
    AtomicDirectory staged(target);
    std::ofstream(staged.path() + "/a.txt") << "alpha";
  }
  EXPECT_FALSE(fs::exists(target));
  EXPECT_EQ(std::distance(fs::directory_iterator(root.path()), fs::directory_iterator{}), 0);
}

TEST(AtomicDirectory, ReplacesAnExistingDirectoryWhole) {
  TempDir root;
  const auto target = root.file("checkpoint-5");
  fs::create_directories(target);
  std::ofstream(target + "/old.txt") << "old";
  AtomicDirectory staged(target);
  std::ofstream(staged.path() + "/new.txt") << "new";
  staged.commit();
  EXPECT_FALSE(fs::exists(target + "/old.txt"));
  EXPECT_EQ(read(target + "/new.txt"), "new");
  EXPECT_EQ(std::distance(fs::directory_iterator(root.path()), fs::directory_iterator{}), 1);
}

TEST(AtomicDirectory, StaleTemporariesOfDeadProcessesAreRemoved) {
  TempDir root;
  const std::string dead = std::to_string(dead_pid());
  const std::string alive = std::to_string(::getppid());  // our parent runs while we do
  fs::create_directories(root.file("checkpoint-7.tmp-" + dead));
  std::ofstream(root.file("checkpoint-7.tmp-" + dead) + "/adapter_model.safetensors") << "partial";
  fs::create_directories(root.file("checkpoint-6.old-" + dead));
  std::ofstream(root.file("adapter_config.json.tmp." + dead)) << "{";
  fs::create_directories(root.file("checkpoint-8.tmp-" + alive));  // another live run's: kept
  fs::create_directories(root.file("checkpoint-2"));                // a real checkpoint: kept
  fs::create_directories(root.file("notes.tmp-x"));                 // not a pid: kept
  auto removed = remove_stale_temp_directories(root.str());
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{"adapter_config.json.tmp." + dead, "checkpoint-6.old-" + dead,
                                               "checkpoint-7.tmp-" + dead}));
  EXPECT_TRUE(fs::exists(root.file("checkpoint-8.tmp-" + alive)));
  EXPECT_TRUE(fs::exists(root.file("checkpoint-2")));
  EXPECT_TRUE(fs::exists(root.file("notes.tmp-x")));
}

}  // namespace
}  // namespace finetune
