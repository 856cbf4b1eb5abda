// The cache layout finetune writes (hub_cache.h), which must be huggingface_hub's: folder names,
// blobs, relative snapshot symlinks, refs, lock files; and the ETag spelling the cache uses.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>
#include <string>

#include "../test_support.h"
#include "finetune/hub/hub_cache.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
const std::string kEtag = "d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592";
const std::string kEtag2 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

std::string contents(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

RepoRef model_repo() { return RepoRef{RepoKind::Model, "Qwen/Qwen3-0.6B", "main"}; }
RepoRef dataset_repo() { return RepoRef{RepoKind::Dataset, "tatsu-lab/alpaca", "main"}; }

TEST(RepoCache, ModelPaths) {
  const RepoCache cache("/cache/hub", model_repo());
  EXPECT_EQ(cache.folder(), "/cache/hub/models--Qwen--Qwen3-0.6B");
  EXPECT_EQ(cache.blob_path(kEtag), "/cache/hub/models--Qwen--Qwen3-0.6B/blobs/" + kEtag);
  EXPECT_EQ(cache.incomplete_path(kEtag), "/cache/hub/models--Qwen--Qwen3-0.6B/blobs/" + kEtag + ".incomplete");
  EXPECT_EQ(cache.lock_path(kEtag), "/cache/hub/.locks/models--Qwen--Qwen3-0.6B/" + kEtag + ".lock");
  EXPECT_EQ(cache.snapshot_dir(kCommit), "/cache/hub/models--Qwen--Qwen3-0.6B/snapshots/" + kCommit);
  EXPECT_EQ(cache.snapshot_file(kCommit, "original/params.json"),
            "/cache/hub/models--Qwen--Qwen3-0.6B/snapshots/" + kCommit + "/original/params.json");
}

TEST(RepoCache, DatasetPaths) {
  const RepoCache cache("/cache/hub", dataset_repo());
  EXPECT_EQ(cache.folder(), "/cache/hub/datasets--tatsu-lab--alpaca");
  EXPECT_EQ(cache.blob_path("abc"), "/cache/hub/datasets--tatsu-lab--alpaca/blobs/abc");
  EXPECT_EQ(cache.lock_path("abc"), "/cache/hub/.locks/datasets--tatsu-lab--alpaca/abc.lock");
  EXPECT_EQ(cache.snapshot_file(kCommit, "data/train-00000-of-00001.parquet"),
            "/cache/hub/datasets--tatsu-lab--alpaca/snapshots/" + kCommit + "/data/train-00000-of-00001.parquet");
}

TEST(RepoCache, NoCacheRootIsAnError) {
  testing::expect_contains(testing::error_message([] { RepoCache("", model_repo()); }), {"HF_HUB_CACHE", "HF_HOME"});
}

class RepoCacheFiles : public ::testing::Test {
 protected:
  void write_blob(const RepoCache& cache, const std::string& etag, const std::string& bytes) {
    fs::create_directories(fs::path(cache.blob_path(etag)).parent_path());
    std::ofstream(cache.blob_path(etag), std::ios::binary) << bytes;
  }
  testing::TempDir dir_{"hub_cache"};
};

TEST_F(RepoCacheFiles, SnapshotFileIsARelativeSymlinkToItsBlob) {
  const RepoCache cache(dir_.str(), model_repo());
  write_blob(cache, kEtag, "{\"model_type\": \"qwen3\"}");
  cache.link_snapshot_file(kCommit, "config.json", kEtag);

  const fs::path pointer = cache.snapshot_file(kCommit, "config.json");
  ASSERT_TRUE(fs::is_symlink(pointer));
  EXPECT_EQ(fs::read_symlink(pointer).generic_string(), "../../blobs/" + kEtag);
  EXPECT_EQ(fs::canonical(pointer), fs::canonical(cache.blob_path(kEtag)));
  EXPECT_EQ(contents(pointer), "{\"model_type\": \"qwen3\"}");
}

TEST_F(RepoCacheFiles, SnapshotFileInASubFolder) {
  const RepoCache cache(dir_.str(), dataset_repo());
  write_blob(cache, kEtag, "PAR1");
  cache.link_snapshot_file(kCommit, "data/train-00000-of-00001.parquet", kEtag);

  const fs::path pointer = cache.snapshot_file(kCommit, "data/train-00000-of-00001.parquet");
  ASSERT_TRUE(fs::is_symlink(pointer));
  EXPECT_EQ(fs::read_symlink(pointer).generic_string(), "../../../blobs/" + kEtag);
  EXPECT_EQ(fs::canonical(pointer), fs::canonical(cache.blob_path(kEtag)));
  EXPECT_EQ(contents(pointer), "PAR1");

  cache.link_snapshot_file(kCommit, "a/b/c.json", kEtag);
  EXPECT_EQ(fs::read_symlink(cache.snapshot_file(kCommit, "a/b/c.json")).generic_string(), "../../../../blobs/" + kEtag);
}

TEST_F(RepoCacheFiles, RelinkingReplacesTheLink) {
  const RepoCache cache(dir_.str(), model_repo());
  write_blob(cache, kEtag, "old");
  write_blob(cache, kEtag2, "new");
  cache.link_snapshot_file(kCommit, "config.json", kEtag);
  cache.link_snapshot_file(kCommit, "config.json", kEtag2);

  const fs::path pointer = cache.snapshot_file(kCommit, "config.json");
  EXPECT_EQ(fs::read_symlink(pointer).generic_string(), "../../blobs/" + kEtag2);
  EXPECT_EQ(contents(pointer), "new");
  EXPECT_EQ(contents(cache.blob_path(kEtag)), "old");  // the old blob is left alone

  // Over a plain file (a cache copied without symlinks) too.
  fs::remove(pointer);
  std::ofstream(pointer) << "copied";
  cache.link_snapshot_file(kCommit, "config.json", kEtag);
  ASSERT_TRUE(fs::is_symlink(pointer));
  EXPECT_EQ(contents(pointer), "old");

  // Nothing but the one entry is left in the snapshot (no temporary link).
  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(cache.snapshot_dir(kCommit)))
    entries.push_back(entry.path().filename().string());
  EXPECT_EQ(entries, std::vector<std::string>{"config.json"});
}

TEST_F(RepoCacheFiles, WriteRefs) {
  const RepoCache cache(dir_.str(), dataset_repo());
  cache.write_ref("main", kCommit);
  EXPECT_EQ(contents(fs::path(cache.folder()) / "refs" / "main"), kCommit);

  const std::string parquet_commit = "fedcba9876543210fedcba9876543210fedcba98";
  cache.write_ref("refs/convert/parquet", parquet_commit);
  EXPECT_EQ(contents(fs::path(cache.folder()) / "refs" / "refs" / "convert" / "parquet"), parquet_commit);

  cache.write_ref("main", parquet_commit);  // a moved branch is overwritten
  EXPECT_EQ(contents(fs::path(cache.folder()) / "refs" / "main"), parquet_commit);
}

TEST_F(RepoCacheFiles, NoRefForACommitRevision) {
  const RepoCache cache(dir_.str(), model_repo());
  cache.write_ref(kCommit, kCommit);
  EXPECT_FALSE(fs::exists(fs::path(cache.folder()) / "refs"));
}

TEST_F(RepoCacheFiles, FileLockIsExclusiveAndReleased) {
  const RepoCache cache(dir_.str(), model_repo());
  const std::string path = cache.lock_path(kEtag);
  // A second open file description of the same file: flock conflicts with it even in this process.
  const auto try_lock = [&] {
    const int fd = ::open(path.c_str(), O_RDWR);
    EXPECT_GE(fd, 0);
    const bool got = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    const int error = errno;
    ::close(fd);
    if (!got) {
      EXPECT_EQ(error, EWOULDBLOCK);
    }
    return got;
  };
  {
    FileLock lock(path);  // creates .locks/<folder>/
    EXPECT_TRUE(fs::is_regular_file(path));
    EXPECT_FALSE(try_lock());
  }
  EXPECT_TRUE(try_lock());
  {
    FileLock again(path);  // sequentially, the same lock is taken again
    EXPECT_FALSE(try_lock());
  }
  EXPECT_TRUE(try_lock());
}

TEST(RepoCache, SafeBlobNames) {
  EXPECT_EQ(kMaxBlobNameBytes, 244u);  // blobs/<etag>.incomplete stays within NAME_MAX (255)
  for (const std::string& good : {kEtag, std::string("abc"), std::string("a1b2-c3"), std::string("x_y.z+w="),
                                  std::string(244, 'a')})
    EXPECT_TRUE(is_safe_blob_name(good)) << good;
  for (const std::string& bad : {std::string(""), std::string("."), std::string(".."), std::string("../x"),
                                std::string("a/b"), std::string("/abs"), std::string(".hidden"), std::string("a\\b"),
                                std::string("a b"), std::string("a\0b", 3), std::string(245, 'a')})
    EXPECT_FALSE(is_safe_blob_name(bad)) << bad;
}

// Names from a server's answer that would reach outside the repo's folder: each is refused before
// any path is built, so nothing is created anywhere.
TEST_F(RepoCacheFiles, HostileNamesAreRefusedBeforeAnyFileIsWritten) {
  const fs::path root = dir_.path() / "a" / "b" / "hub";
  const RepoCache cache(root.string(), model_repo());
  const auto refused = [](auto&& action, const std::string& part) {
    testing::expect_contains(testing::error_message(action), {part, "refusing"});
  };
  refused([&] { cache.link_snapshot_file("../../..", "config.json", kEtag); }, "is not a commit id");
  refused([&] { cache.link_snapshot_file("0123456789ABCDEF0123456789abcdef01234567", "config.json", kEtag); },
          "is not a commit id");
  refused([&] { cache.link_snapshot_file(kCommit, "../../../../config.json", kEtag); }, "not a path inside a repo");
  refused([&] { cache.link_snapshot_file(kCommit, "/etc/passwd", kEtag); }, "not a path inside a repo");
  refused([&] { cache.link_snapshot_file(kCommit, "config.json", "../../../x"); }, "not a safe blob file name");
  refused([&] { cache.blob_path("a/b"); }, "not a safe blob file name");
  refused([&] { cache.lock_path("../x"); }, "not a safe blob file name");
  refused([&] { cache.write_ref("../../../main", kCommit); }, "not a safe ref name");
  refused([&] { cache.write_ref("main", "../x"); }, "is not a commit id");
  EXPECT_FALSE(fs::exists(dir_.path() / "a"));
}

// A snapshot path longer than PATH_MAX under a deep cache root (seen while writing the hub_answers
// fuzz target): an Error naming the link, not a std::filesystem_error from the clean-up of the
// link never made.
TEST_F(RepoCacheFiles, ASnapshotPathTooLongForTheFileSystemIsAnError) {
  std::string root = dir_.str();
  while (root.size() + 201 < 3950) root += "/" + std::string(200, 'r');  // snapshots/<commit>/ still fits
  const RepoCache cache(root, model_repo());
  const std::string name(250, 'a');  // a valid repo path; the whole snapshot path passes 4096 bytes
  testing::expect_contains(testing::error_message([&] { cache.link_snapshot_file(kCommit, name, kEtag); }),
                           {name, "cannot link the snapshot file to its blob", "too long"});
}

TEST(RepoCache, NormalizeEtag) {
  EXPECT_EQ(normalize_etag("\"" + kEtag + "\""), kEtag);
  EXPECT_EQ(normalize_etag("W/\"" + kEtag + "\""), kEtag);
  EXPECT_EQ(normalize_etag(kEtag), kEtag);
  EXPECT_EQ(normalize_etag("\"a1b2-c3\""), "a1b2-c3");
  EXPECT_EQ(normalize_etag("W/abc"), "abc");
  EXPECT_EQ(normalize_etag("\"\""), "");
  EXPECT_EQ(normalize_etag(""), "");
}

}  // namespace
}  // namespace finetune
