#include "finetune/hub/repo_files.h"

#include <algorithm>
#include <set>

#include "finetune/util/errors.h"
#include "finetune/util/file_contents.h"
#include "finetune/util/json_parse.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

bool is_metadata_file(const std::string& name) {
  for (const char* suffix : {".json", ".model", ".jinja", ".txt", ".tiktoken"})
    if (ends_with(name, suffix)) return true;
  return false;
}

}  // namespace

std::vector<std::string> model_files_without_shards(const std::string& what, const std::vector<std::string>& listing) {
  std::vector<std::string> files;
  bool has_index = false, has_single = false;
  std::vector<std::string> other_weights;
  for (const auto& path : listing) {
    if (path.find('/') != std::string::npos) continue;  // sub-folders: original/, onnx/, ...
    if (path == kSafetensorsIndex) has_index = true;
    if (path == "model.safetensors") has_single = true;
    if (is_metadata_file(path)) files.push_back(path);
    for (const char* suffix : {".bin", ".pth", ".pt", ".h5", ".msgpack", ".gguf", ".safetensors"})
      if (ends_with(path, suffix) && path != "model.safetensors") other_weights.push_back(path);
  }
  if (has_single && !has_index) files.push_back("model.safetensors");
  if (!has_index && !has_single) {
    throw Error(what + ": no safetensors weights (model.safetensors or " + std::string(kSafetensorsIndex) + ")" +
                (other_weights.empty() ? std::string() : "; it has " + join(other_weights, ", ")) +
                ". finetune reads safetensors only: save the model with save_pretrained(safe_serialization=True)");
  }
  if (std::find(files.begin(), files.end(), "config.json") == files.end()) {
    throw Error(what + ": no config.json at the top of the repo: not a transformers model");
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> shards_of_index(const std::string& index_path) {
  const auto index = parse_ordered_json(read_file(index_path, "safetensors index"), index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw Error(index_path + ": no weight_map object");
  }
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) throw Error(index_path + ": weight_map." + tensor + " is not a file name");
    const std::string name = shard.get<std::string>();
    if (name.empty() || name.find("..") != std::string::npos || name.front() == '/') {
      throw Error(index_path + ": weight_map." + tensor + " names '" + name + "', not a file of the repo");
    }
    shards.insert(name);
  }
  return {shards.begin(), shards.end()};
}

}  // namespace finetune
