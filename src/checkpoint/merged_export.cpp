#include "finetune/checkpoint/merged_export.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "finetune/model/device_selection.h"
#include "finetune/checkpoint/tensor_io.h"
#include "finetune/util/atomic_file.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

constexpr int64_t kMaxShardBytes = int64_t{5} << 30;

const char* const kCopiedFiles[] = {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                                    "special_tokens_map.json", "generation_config.json", "chat_template.jinja",
                                    "added_tokens.json", "vocab.json", "merges.txt"};

std::string shard_name(size_t index, size_t count) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return buffer;
}

}  // namespace

void export_merged(const CausalLM& model, const std::string& base_model_dir, const std::string& out_dir) {
  at::NoGradGuard no_grad;
  std::filesystem::create_directories(out_dir);

  std::map<const void*, const Linear*> adapted_by_weight;
  for (const auto& [name, linear] : model.named_linears()) {
    if (linear->adapter) adapted_by_weight[linear->weight.data_ptr()] = linear;
  }
  // Merge on the device, keep CPU copies, split into shards in parameter order.
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  int64_t shard_bytes = 0;
  for (const auto& [name, weight] : model.named_parameters()) {
    at::Tensor merged = weight;
    auto it = adapted_by_weight.find(weight.data_ptr());
    if (it != adapted_by_weight.end()) merged = it->second->adapter->merged_weight(*it->second);
    const int64_t bytes = merged.numel() * static_cast<int64_t>(merged.element_size());
    if (shard_bytes > 0 && shard_bytes + bytes > kMaxShardBytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace_back(name, merged.cpu());
    shard_bytes += bytes;
  }
  if (shards.size() == 1) {
    save_tensors(out_dir + "/model.safetensors", shards[0], {{"format", "pt"}});
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    int64_t total_size = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      const auto file = shard_name(i, shards.size());
      for (const auto& [name, tensor] : shards[i]) {
        weight_map[name] = file;
        total_size += tensor.numel() * static_cast<int64_t>(tensor.element_size());
      }
      save_tensors(out_dir + "/" + file, shards[i], {{"format", "pt"}});
    }
    nlohmann::json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
    write_file_atomically(out_dir + "/model.safetensors.index.json", index.dump(2) + "\n");
  }

  auto config = model.config().raw;
  const auto dtype = dtype_string(model.dtype());
  config["dtype"] = dtype;
  if (config.contains("torch_dtype")) config["torch_dtype"] = dtype;
  write_file_atomically(out_dir + "/config.json", config.dump(2) + "\n");
  for (const char* file : kCopiedFiles) {
    const auto source = std::filesystem::path(base_model_dir) / file;
    if (std::filesystem::exists(source)) copy_file_atomically(source.string(), out_dir + "/" + file);
  }
}

}  // namespace finetune
