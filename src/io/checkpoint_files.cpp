// CheckpointFiles: finds a model directory's safetensors weights (one file, or shards listed by an
// index json, as transformers writes them) and checks that the index and the shards agree.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "finetune/io/safetensors.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"
#include "finetune/util/path_status.h"

namespace finetune {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSingleFileName = "model.safetensors";
constexpr const char* kIndexFileName = "model.safetensors.index.json";

// weight_map: tensor name -> shard file name (relative to the model directory).
std::map<std::string, std::string> read_weight_map(const fs::path& index_path) {
  const std::string context = "checkpoint index '" + index_path.string() + "'";
  const json index = read_json_file(index_path.string());
  if (!index.is_object()) throw Error(context + ": must be a JSON object");
  auto weight_map = index.find("weight_map");
  if (weight_map == index.end() || !weight_map->is_object()) {
    throw Error(context + ": missing 'weight_map' object {tensor name: shard file}");
  }
  std::map<std::string, std::string> result;
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string() || shard.get<std::string>().empty()) {
      throw Error(context + ": weight_map entry for tensor '" + tensor +
                  "' must be a shard file name, got " + json_excerpt(shard));
    }
    result.emplace(tensor, shard.get<std::string>());
  }
  if (result.empty()) throw Error(context + ": 'weight_map' lists no tensors");
  return result;
}

}  // namespace

CheckpointFiles CheckpointFiles::open_dir(const std::string& model_dir) {
  CheckpointFiles checkpoint;
  checkpoint.dir_ = model_dir;
  const fs::path dir(model_dir);
  const fs::path single_path = dir / kSingleFileName;
  const fs::path index_path = dir / kIndexFileName;

  auto add_file = [&checkpoint](const fs::path& path) -> const SafetensorsFile& {
    checkpoint.files_.push_back(
        std::make_unique<SafetensorsFile>(SafetensorsFile::open(path.string())));
    const SafetensorsFile& file = *checkpoint.files_.back();
    const size_t file_index = checkpoint.files_.size() - 1;
    for (const TensorInfo& info : file.tensors()) {
      auto [it, inserted] = checkpoint.file_of_tensor_.emplace(info.name, file_index);
      if (!inserted) {
        throw Error("checkpoint '" + checkpoint.dir_ + "': tensor '" + info.name +
                    "' appears in two shards, '" + checkpoint.files_[it->second]->path() +
                    "' and '" + file.path() + "'");
      }
    }
    return file;
  };

  // transformers prefers the single file when both exist; so do we.
  if (is_regular_file_at(single_path.string(), "the model weights")) {
    add_file(single_path);
    return checkpoint;
  }
  if (!is_regular_file_at(index_path.string(), "the model weights' index")) {
    throw Error("model directory '" + model_dir + "' has no safetensors weights: looked for '" +
                kSingleFileName + "' and '" + kIndexFileName + "'" +
                (is_directory_at(model_dir, "the model directory") ? "" : " (the directory does not exist)"));
  }

  const std::map<std::string, std::string> weight_map = read_weight_map(index_path);
  std::map<std::string, std::vector<std::string>> tensors_of_shard;
  for (const auto& [tensor, shard] : weight_map) tensors_of_shard[shard].push_back(tensor);

  for (const auto& [shard, tensors] : tensors_of_shard) {
    const fs::path shard_path = dir / shard;
    std::error_code error;  // the name comes from the file: the throwing overload would escape as filesystem_error
    if (!fs::is_regular_file(shard_path, error)) {
      throw Error("checkpoint index '" + index_path.string() + "': shard '" + shard_path.string() +
                  "' (holding tensor '" + tensors.front() + "') does not exist" +
                  (error ? " (" + error.message() + ")" : ""));
    }
    const SafetensorsFile& file = add_file(shard_path);
    for (const std::string& tensor : tensors) {
      if (file.find(tensor) == nullptr) {
        throw Error("checkpoint index '" + index_path.string() + "': tensor '" + tensor +
                    "' is mapped to shard '" + shard_path.string() + "' which does not hold it");
      }
    }
  }
  return checkpoint;
}

std::vector<std::string> CheckpointFiles::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(file_of_tensor_.size());
  for (const auto& entry : file_of_tensor_) names.push_back(entry.first);
  return names;
}

bool CheckpointFiles::contains(const std::string& name) const {
  return file_of_tensor_.count(name) != 0;
}

const SafetensorsFile& CheckpointFiles::file_of(const std::string& name) const {
  auto it = file_of_tensor_.find(name);
  if (it == file_of_tensor_.end()) {
    throw Error("checkpoint '" + dir_ + "': no tensor named '" + name + "'");
  }
  return *files_[it->second];
}

const TensorInfo& CheckpointFiles::info(const std::string& name) const {
  return file_of(name).at(name);
}

}  // namespace finetune
