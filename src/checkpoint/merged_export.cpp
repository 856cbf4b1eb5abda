#include "finetune/checkpoint/merged_export.h"

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "finetune/model/device_selection.h"
#include "finetune/model/moe_names.h"
#include "finetune/quant/nf4.h"
#include "finetune/quant/nf4_state_dict.h"
#include "finetune/weights/tensor_io.h"
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

// transformers' BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
// bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype).to_dict(), as it writes it.
nlohmann::json quantization_config_4bit(const std::string& compute_dtype) {
  return {{"_load_in_4bit", true},
          {"_load_in_8bit", false},
          {"bnb_4bit_compute_dtype", compute_dtype},
          {"bnb_4bit_quant_storage", "uint8"},
          {"bnb_4bit_quant_type", "nf4"},
          {"bnb_4bit_use_double_quant", true},
          {"llm_int8_enable_fp32_cpu_offload", false},
          {"llm_int8_has_fp16_weight", false},
          {"llm_int8_skip_modules", nullptr},
          {"llm_int8_threshold", 6.0},
          {"load_in_4bit", true},
          {"load_in_8bit", false},
          {"quant_method", "bitsandbytes"}};
}

// A MoE model's router and expert stacks as the checkpoint stores them (Note [Expert tensors]):
// each stack with its adapter folded in, split into one tensor per expert and projection. False
// for every other tensor.
bool add_moe_checkpoint_tensors(const CausalLM& model, const std::string& name, const at::Tensor& parameter,
                                const std::map<std::string, const ExpertStack*>& stacks,
                                std::vector<std::pair<std::string, at::Tensor>>& out) {
  const auto pieces = checkpoint_pieces(model.architecture(), model.config(), name);
  if (pieces.size() == 1 && pieces.front().expert < 0 && pieces.front().name == name) return false;
  auto it = stacks.find(name);
  const at::Tensor merged = it == stacks.end() ? parameter : it->second->merged_weight();
  for (const auto& piece : pieces) {
    const auto rows = piece.expert < 0 ? merged : merged[piece.expert].narrow(0, piece.row_begin, piece.rows);
    out.emplace_back(piece.name, rows);
  }
  return true;
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> merged_named_tensors(const CausalLM& model, bool quantize_4bit) {
  std::map<std::string, const ExpertStack*> expert_stacks;
  for (const auto& [name, stack] : model.named_expert_stacks()) expert_stacks[name] = stack;
  std::map<std::string, const Linear*> projection_of_weight;
  for (const auto& [name, linear] : model.named_linears()) projection_of_weight[name + ".weight"] = linear;
  std::vector<std::pair<std::string, at::Tensor>> out;
  auto add_projection = [&](const std::string& name, const Linear& linear) {
    auto merged = linear.adapter ? linear.adapter->merged_weight(linear) : linear.dense_weight();  // (out, in)
    if (!quantize_4bit) {
      out.emplace_back(name, merged);
      return;
    }
    const auto weight = quantize_nf4(merged, /*compress_statistics=*/true);
    for (auto& [suffix, tensor] : nf4_state_dict(weight)) out.emplace_back(name + suffix, tensor);
  };
  for (const auto& [name, parameter] : model.named_parameters()) {
    // Expert stacks stay 16-bit in a 4-bit export: bitsandbytes quantizes nn.Linear layers only.
    if (add_moe_checkpoint_tensors(model, name, parameter, expert_stacks, out)) continue;
    auto it = projection_of_weight.find(name);
    if (it == projection_of_weight.end()) {
      out.emplace_back(name, parameter);
    } else {
      add_projection(name, *it->second);
      projection_of_weight.erase(it);
    }
  }
  for (const auto& [name, linear] : projection_of_weight) add_projection(name, *linear);  // 4-bit bases
  return out;
}

void export_merged(const CausalLM& model, const std::string& base_model_dir, const std::string& out_dir,
                   bool quantize_4bit) {
  at::NoGradGuard no_grad;
  std::filesystem::create_directories(out_dir);

  // Merge on the device, keep CPU copies, split into shards in parameter order.
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  int64_t shard_bytes = 0;
  for (const auto& [name, tensor] : merged_named_tensors(model, quantize_4bit)) {
    const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    if (shard_bytes > 0 && shard_bytes + bytes > kMaxShardBytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace_back(name, tensor.cpu());
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
  if (quantize_4bit) {
    config["quantization_config"] = quantization_config_4bit(dtype);
  } else {
    config.erase("quantization_config");  // a 4-bit base merged into 16-bit weights
  }
  write_file_atomically(out_dir + "/config.json", config.dump(2) + "\n");
  for (const char* file : kCopiedFiles) {
    const auto source = std::filesystem::path(base_model_dir) / file;
    if (std::filesystem::exists(source)) copy_file_atomically(source.string(), out_dir + "/" + file);
  }
}

}  // namespace finetune
