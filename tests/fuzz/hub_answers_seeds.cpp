// Seeds of the hub_answers target (hub_answers_target.h): "REPO_INFO\0HEAD\0INDEX" as the hub
// answers for a sharded model, a single-file model with a plain 200 HEAD, and a dataset-like
// listing. Each one is accepted whole: the HEAD's commit is the repo info's sha.
#include <string>
#include <vector>

#include "fuzz_seeds.h"

namespace finetune::fuzz {
namespace {

const std::string kSha = "0123456789abcdef0123456789abcdef01234567";
const std::string kEtag = "d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592";

std::string seed(const std::string& repo_info, const std::string& head, const std::string& index) {
  return repo_info + std::string(1, '\0') + head + std::string(1, '\0') + index;
}

std::string repo_info(const std::vector<std::string>& files) {
  std::string siblings;
  for (const std::string& file : files)
    siblings += (siblings.empty() ? "" : ", ") + ("{\"rfilename\": \"" + file + "\"}");
  return "{\"_id\": \"x\", \"id\": \"org/model\", \"sha\": \"" + kSha + "\", \"siblings\": [" + siblings + "]}";
}

const std::string kIndex =
    R"({"metadata": {"total_size": 64}, "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors",
     "model.embed_tokens.weight": "model-00001-of-00002.safetensors"}})";

}  // namespace

std::vector<std::string> hub_answers_seeds() {
  const std::string redirect = "HTTP/1.1 302 Found\r\nX-Repo-Commit: " + kSha +
                               "\r\nETag: \"3f2a\"\r\nX-Linked-Etag: \"" + kEtag +
                               "\"\r\nX-Linked-Size: 1048576\r\nContent-Length: 1092\r\nLocation: " +
                               "https://cdn-lfs.hf.co/repos/ab/cd/" + kEtag + "?X-Amz-Expires=3600\r\n\r\n";
  const std::string plain = "HTTP/2 200\r\nx-repo-commit: " + kSha + "\r\netag: W/\"" + kEtag.substr(0, 40) +
                            "\"\r\ncontent-length: 680\r\n\r\n";
  return {
      seed(repo_info({"model-00001-of-00002.safetensors", ".gitattributes", "config.json",
                      "model.safetensors.index.json", "model-00002-of-00002.safetensors", "tokenizer.json"}),
           redirect, kIndex),
      seed(repo_info({"config.json", "model.safetensors", "original/params.json", "tokenizer_config.json"}), plain,
           R"({"weight_map": {}})"),
      seed(repo_info({"model.safetensors", "config.json", "data/train-00000-of-00001.parquet",
                      "data/validation.jsonl"}),
           "HTTP/1.1 307 Temporary Redirect\nX-Repo-Commit: " + kSha + "\nX-Linked-Etag: " + kEtag +
               "\nX-Linked-Size: 0\nLocation: http://127.0.0.1:5564/blob\n",
           kIndex),
  };
}

}  // namespace finetune::fuzz
