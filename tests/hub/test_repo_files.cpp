// Which files of a hub model repo a download fetches (repo_files.h): the top-level metadata and
// the safetensors weights, never other weight formats nor sub-folders; and the shards an index
// names.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../test_support.h"
#include "finetune/hub/repo_files.h"

namespace finetune {
namespace {

using Files = std::vector<std::string>;

// What meta-llama/Llama-3.1-8B-Instruct lists, in the hub's (unsorted) order.
Files llama_listing() {
  return {".gitattributes",
          "LICENSE",
          "README.md",
          "config.json",
          "generation_config.json",
          "model-00001-of-00002.safetensors",
          "model-00002-of-00002.safetensors",
          "model.safetensors.index.json",
          "original/consolidated.00.pth",
          "original/params.json",
          "original/tokenizer.model",
          "pytorch_model.bin",
          "special_tokens_map.json",
          "tokenizer.json",
          "tokenizer_config.json"};
}

TEST(RepoFiles, ShardedModelGetsTopLevelMetadataAndTheIndex) {
  Files listing = llama_listing();
  std::reverse(listing.begin(), listing.end());  // the answer is sorted whatever the listing's order
  EXPECT_EQ(model_files_without_shards("model meta-llama/Llama-3.1-8B-Instruct", listing),
            (Files{"config.json", "generation_config.json", "model.safetensors.index.json", "special_tokens_map.json",
                   "tokenizer.json", "tokenizer_config.json"}));
}

TEST(RepoFiles, SingleSafetensorsFileIsIncluded) {
  const Files listing = {"config.json",      "model.safetensors", "tokenizer.model", "chat_template.jinja",
                         "merges.txt",       "vocab.json",        "qwen.tiktoken",   "pytorch_model.bin",
                         "tf_model.h5",      "flax_model.msgpack", "model.onnx",     "README.md",
                         "onnx/model.onnx",  "sub/config.json"};
  EXPECT_EQ(model_files_without_shards("model org/single", listing),
            (Files{"chat_template.jinja", "config.json", "merges.txt", "model.safetensors", "qwen.tiktoken",
                   "tokenizer.model", "vocab.json"}));
}

TEST(RepoFiles, IndexWinsOverASingleFile) {
  // With both, the index decides (its shards come later): model.safetensors is not fetched.
  EXPECT_EQ(model_files_without_shards("model org/both", {"config.json", "model.safetensors",
                                                          "model.safetensors.index.json",
                                                          "model-00001-of-00001.safetensors"}),
            (Files{"config.json", "model.safetensors.index.json"}));
}

TEST(RepoFiles, OnlyPytorchWeightsIsAnError) {
  const std::string message = testing::error_message([] {
    model_files_without_shards("model org/old", {"config.json", "pytorch_model.bin", "tokenizer.json"});
  });
  testing::expect_contains(message, {"model org/old", "pytorch_model.bin", "safetensors", "safe_serialization=True"});
}

TEST(RepoFiles, SafetensorsOnlyInASubFolderIsAnError) {
  const std::string message = testing::error_message([] {
    model_files_without_shards("model org/nested", {"config.json", "weights/model.safetensors"});
  });
  testing::expect_contains(message, {"model org/nested", "no safetensors weights"});
}

TEST(RepoFiles, NoConfigIsAnError) {
  const std::string message = testing::error_message([] {
    model_files_without_shards("model org/noconfig", {"model.safetensors", "tokenizer.json", "original/config.json"});
  });
  testing::expect_contains(message, {"model org/noconfig", "config.json"});
}

class RepoFilesIndex : public ::testing::Test {
 protected:
  std::string write_index(const std::string& json) {
    dir_.write(kSafetensorsIndex, json);
    return dir_.file(kSafetensorsIndex);
  }
  testing::TempDir dir_{"repo_files"};
};

TEST_F(RepoFilesIndex, ShardsAreSortedAndUnique) {
  const std::string path = write_index(R"({
    "metadata": {"total_size": 16060522496},
    "weight_map": {
      "lm_head.weight": "model-00004-of-00004.safetensors",
      "model.embed_tokens.weight": "model-00001-of-00004.safetensors",
      "model.layers.0.mlp.down_proj.weight": "model-00001-of-00004.safetensors",
      "model.layers.20.mlp.up_proj.weight": "model-00003-of-00004.safetensors",
      "model.layers.9.self_attn.q_proj.weight": "model-00002-of-00004.safetensors",
      "model.norm.weight": "model-00004-of-00004.safetensors"
    }
  })");
  EXPECT_EQ(shards_of_index(path), (Files{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                          "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"}));
}

TEST_F(RepoFilesIndex, EmptyWeightMapHasNoShards) {
  EXPECT_EQ(shards_of_index(write_index(R"({"weight_map": {}})")), Files{});
}

TEST_F(RepoFilesIndex, MalformedIndexesNameTheFile) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "{\"weight_map\": "},
      {"no weight_map", R"({"metadata": {}})"},
      {"weight_map not an object", R"({"weight_map": ["a.safetensors"]})"},
      {"top level not an object", R"(["model.safetensors"])"},
  };
  for (const auto& [label, json] : cases) {
    SCOPED_TRACE(label);
    const std::string path = write_index(json);
    testing::expect_contains(testing::error_message([&] { shards_of_index(path); }), {path});
  }
}

TEST_F(RepoFilesIndex, NonStringEntriesNameTheTensor) {
  const std::string path = write_index(R"({"weight_map": {"model.norm.weight": 3}})");
  testing::expect_contains(testing::error_message([&] { shards_of_index(path); }),
                           {path, "weight_map.model.norm.weight", "not a file name"});
}

TEST_F(RepoFilesIndex, NamesOutsideTheRepoAreRefused) {
  for (const char* name : {"../x", "../../etc/passwd", "sub/../../x.safetensors", "/abs.safetensors", ""}) {
    SCOPED_TRACE(name);
    const std::string path = write_index(std::string(R"({"weight_map": {"w": ")") + name + "\"}}");
    testing::expect_contains(testing::error_message([&] { shards_of_index(path); }),
                             {path, "weight_map.w", "'" + std::string(name) + "'", "not a file of the repo"});
  }
}

TEST_F(RepoFilesIndex, MissingIndexIsNamed) {
  const std::string path = dir_.file("absent.index.json");
  testing::expect_contains(testing::error_message([&] { shards_of_index(path); }), {path});
}

}  // namespace
}  // namespace finetune
