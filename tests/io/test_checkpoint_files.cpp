// CheckpointFiles: single-file and sharded model directories, and every way index and shards can
// disagree.
#include <gtest/gtest.h>

#include <fstream>

#include "finetune/io/safetensors.h"
#include "finetune/util/errors.h"
#include "io_test_helpers.h"

namespace finetune {
namespace {

using io_test::Bytes;
using io_test::pattern_bytes;
using io_test::TempDir;
using io_test::write_bytes;

using testing::error_message;

using testing::expect_contains;

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Shard files each holding the named U8 tensors (tensor i has i + 1 bytes of a known pattern).
void write_shard(const std::string& path, const std::vector<std::string>& names) {
  std::vector<Bytes> contents;
  std::vector<TensorView> views;
  for (const std::string& name : names) contents.push_back(pattern_bytes(name.size(), name[0]));
  for (size_t i = 0; i < names.size(); ++i) {
    views.push_back(
        {names[i], DType::U8, {static_cast<int64_t>(names[i].size())}, contents[i].data()});
  }
  write_safetensors(path, views, {{"format", "pt"}});
}

const char* const kShard1 = "model-00001-of-00002.safetensors";
const char* const kShard2 = "model-00002-of-00002.safetensors";

// A valid two-shard checkpoint; tests then damage it.
void write_sharded(const TempDir& dir) {
  write_shard(dir.file(kShard1),
              {"model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight"});
  write_shard(dir.file(kShard2), {"lm_head.weight", "model.norm.weight"});
  write_text(dir.file("model.safetensors.index.json"), std::string(R"({
    "metadata": {"total_size": 80},
    "weight_map": {
      "lm_head.weight": ")") + kShard2 + R"(",
      "model.embed_tokens.weight": ")" + kShard1 + R"(",
      "model.layers.0.mlp.up_proj.weight": ")" + kShard1 + R"(",
      "model.norm.weight": ")" + kShard2 + R"("
    }})");
}

TEST(CheckpointFiles, SingleFile) {
  TempDir dir;
  write_shard(dir.file("model.safetensors"), {"b.weight", "a.weight"});
  CheckpointFiles checkpoint = CheckpointFiles::open_dir(dir.path().string());
  EXPECT_EQ(checkpoint.tensor_names(), (std::vector<std::string>{"a.weight", "b.weight"}));
  EXPECT_TRUE(checkpoint.contains("a.weight"));
  EXPECT_FALSE(checkpoint.contains("c.weight"));
  EXPECT_EQ(checkpoint.file_of("a.weight").path(), dir.file("model.safetensors"));
  EXPECT_EQ(checkpoint.info("b.weight").shape, std::vector<int64_t>{8});
  EXPECT_EQ(checkpoint.files().size(), 1u);
}

TEST(CheckpointFiles, ShardedWithIndex) {
  TempDir dir;
  write_sharded(dir);
  CheckpointFiles checkpoint = CheckpointFiles::open_dir(dir.path().string());
  EXPECT_EQ(checkpoint.tensor_names(),
            (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight",
                                      "model.layers.0.mlp.up_proj.weight", "model.norm.weight"}));
  EXPECT_EQ(checkpoint.files().size(), 2u);
  EXPECT_EQ(checkpoint.file_of("model.norm.weight").path(), dir.file(kShard2));
  EXPECT_EQ(checkpoint.file_of("model.embed_tokens.weight").path(), dir.file(kShard1));
  const std::string name = "model.layers.0.mlp.up_proj.weight";
  const TensorInfo& info = checkpoint.info(name);
  EXPECT_EQ(info.shape, std::vector<int64_t>{static_cast<int64_t>(name.size())});
  const auto* data = static_cast<const uint8_t*>(checkpoint.file_of(name).data(info));
  EXPECT_EQ(Bytes(data, data + name.size()), pattern_bytes(name.size(), name[0]));

  const std::string message = error_message([&] { checkpoint.file_of("missing.weight"); });
  expect_contains(message, {dir.path().string(), "'missing.weight'"});
  EXPECT_THROW(checkpoint.info("missing.weight"), Error);
}

TEST(CheckpointFiles, SingleFileWinsOverIndex) {
  TempDir dir;
  write_sharded(dir);
  write_shard(dir.file("model.safetensors"), {"only.weight"});
  EXPECT_EQ(CheckpointFiles::open_dir(dir.path().string()).tensor_names(),
            std::vector<std::string>{"only.weight"});
}

TEST(CheckpointFiles, NoWeightsSaysWhatWasLookedFor) {
  TempDir dir;
  write_text(dir.file("config.json"), "{}");
  std::string message = error_message([&] { CheckpointFiles::open_dir(dir.path().string()); });
  expect_contains(message,
                  {dir.path().string(), "'model.safetensors'", "'model.safetensors.index.json'"});
  const std::string missing = dir.file("nowhere");
  message = error_message([&] { CheckpointFiles::open_dir(missing); });
  expect_contains(message, {missing, "does not exist"});
}

// A model directory whose name the file system refuses (ENAMETOOLONG): an Error naming the path,
// not a bare std::filesystem_error.
TEST(CheckpointFiles, APathTheFileSystemRefusesIsNamed) {
  TempDir dir;
  const std::string too_long = dir.file(std::string(300, 'a'));
  expect_contains(error_message([&] { CheckpointFiles::open_dir(too_long); }),
                  {too_long + "/model.safetensors: cannot look at the model weights", "File name too long"});
  write_text(dir.file("a_file"), "x");  // ENOTDIR: nothing there
  expect_contains(error_message([&] { CheckpointFiles::open_dir(dir.file("a_file")); }),
                  {dir.file("a_file"), "no safetensors weights", "does not exist"});
}

TEST(CheckpointFiles, MissingShardFileIsNamed) {
  TempDir dir;
  write_sharded(dir);
  std::filesystem::remove(dir.file(kShard2));
  const std::string message =
      error_message([&] { CheckpointFiles::open_dir(dir.path().string()); });
  expect_contains(message,
                  {dir.file("model.safetensors.index.json"), dir.file(kShard2), "does not exist"});
}

TEST(CheckpointFiles, TensorMissingFromItsShardNamesIndexShardAndTensor) {
  TempDir dir;
  write_sharded(dir);
  write_shard(dir.file(kShard2), {"lm_head.weight"});  // drops model.norm.weight
  const std::string message =
      error_message([&] { CheckpointFiles::open_dir(dir.path().string()); });
  expect_contains(message, {dir.file("model.safetensors.index.json"), dir.file(kShard2),
                            "'model.norm.weight'"});
}

TEST(CheckpointFiles, TensorInTwoShardsIsAnError) {
  TempDir dir;
  write_sharded(dir);
  write_shard(dir.file(kShard2),
              {"lm_head.weight", "model.norm.weight", "model.embed_tokens.weight"});
  const std::string message =
      error_message([&] { CheckpointFiles::open_dir(dir.path().string()); });
  expect_contains(
      message, {"'model.embed_tokens.weight'", "two shards", dir.file(kShard1), dir.file(kShard2)});
}

TEST(CheckpointFiles, MalformedIndexIsNamed) {
  TempDir dir;
  write_sharded(dir);
  const std::string index = dir.file("model.safetensors.index.json");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "invalid JSON at line 1, column 3"},
      {"[]", "must be a JSON object"},
      {R"({"metadata": {}})", "missing 'weight_map'"},
      {R"({"weight_map": []})", "missing 'weight_map'"},
      {R"({"weight_map": {}})", "lists no tensors"},
      {R"({"weight_map": {"lm_head.weight": 2}})", "'lm_head.weight'"},
      {R"({"weight_map": {"lm_head.weight": ""}})", "'lm_head.weight'"},
      // A name the file system refuses (ENAMETOOLONG) once escaped as std::filesystem_error.
      {R"({"weight_map": {"lm_head.weight": ")" + std::string(5000, 'x') + "\"}}", "does not exist (File name too long)"},
      // ~120 KB of nesting, as the file or below a shard entry: refused while parsing.
      {testing::nested_json('['), "nests deeper than 128 levels"},
      {testing::nested_json('{'), "nests deeper than 128 levels"},
      {R"({"weight_map": {"lm_head.weight": )" + testing::nested_json('[') + "}}", "nests deeper than 128 levels"},
      {R"({"weight_map": {"lm_head.weight": )" + testing::nested_json('{') + "}}", "nests deeper than 128 levels"},
  };
  for (const auto& [text, phrase] : cases) {
    write_text(index, text);
    const std::string message =
        error_message([&] { CheckpointFiles::open_dir(dir.path().string()); });
    expect_contains(message, {index, phrase});
  }
}

TEST(CheckpointFiles, MalformedShardIsNamed) {
  TempDir dir;
  write_sharded(dir);
  write_bytes(dir.file(kShard1), Bytes{1, 2, 3});
  const std::string message =
      error_message([&] { CheckpointFiles::open_dir(dir.path().string()); });
  expect_contains(message, {dir.file(kShard1), "shorter than the 8-byte header length"});
}

}  // namespace
}  // namespace finetune
