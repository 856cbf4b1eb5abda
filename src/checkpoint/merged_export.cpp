#include "finetune/checkpoint/merged_export.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>

#include <nlohmann/json.hpp>

#include "finetune/checkpoint/merged_parameters.h"
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

// A tensor whose values are already made.
TensorToSave made(const std::string& name, const at::Tensor& tensor) {
  return {name, tensor.scalar_type(), tensor.sizes().vec(), [tensor] { return tensor; }};
}

// A MoE tensor's merged value, shared by the checkpoint tensors cut from it: merged when the
// first of them is written, let go after the last, so an export holds one stack's merge at a time.
class SharedStackMerge {
 public:
  SharedStackMerge(std::function<at::Tensor()> values, size_t pieces)
      : values_(std::move(values)), pieces_left_(pieces) {}

  at::Tensor piece(const CheckpointPiece& piece) {
    if (!merged_.defined()) merged_ = values_();  // (E, out, in) for a stack
    auto rows = piece.expert < 0 ? merged_ : merged_[piece.expert].narrow(0, piece.row_begin, piece.rows);
    if (--pieces_left_ == 0) merged_ = at::Tensor();
    return rows;
  }

 private:
  std::function<at::Tensor()> values_;
  size_t pieces_left_;
  at::Tensor merged_;
};

// A MoE model's router and expert stacks as the checkpoint stores them (Note [Expert tensors]):
// each stack with its adapter folded in, split into one tensor per expert and projection. False
// for every other tensor.
bool add_moe_checkpoint_tensors(const CausalLM& model, const MergedParameter& parameter,
                                std::vector<TensorToSave>& out) {
  const auto pieces = checkpoint_pieces(model.architecture(), model.config(), parameter.name);
  if (pieces.size() == 1 && pieces.front().expert < 0 && pieces.front().name == parameter.name) return false;
  auto merge = std::make_shared<SharedStackMerge>(parameter.values, pieces.size());
  for (const auto& piece : pieces) {
    auto shape = piece.expert < 0 ? parameter.shape : std::vector<int64_t>{piece.rows, parameter.shape.at(2)};
    out.push_back({piece.name, parameter.dtype, std::move(shape), [merge, piece] { return merge->piece(piece); }});
  }
  return true;
}

// The projection merged and quantized to NF4 now: the quant_state's length depends on the values,
// and the shards are planned from every tensor's size. The 4-bit tensors are about a quarter of
// the 16-bit weight.
void add_nf4_projection(const MergedParameter& projection, std::vector<TensorToSave>& out) {
  const auto weight = quantize_nf4(projection.values(), /*compress_statistics=*/true);
  for (auto& [suffix, tensor] : nf4_state_dict(weight)) out.push_back(made(projection.name + suffix, tensor));
}

int64_t byte_count(const TensorToSave& tensor) {
  int64_t count = static_cast<int64_t>(c10::elementSize(tensor.dtype));
  for (int64_t size : tensor.shape) count *= size;
  return count;
}

}  // namespace

std::vector<TensorToSave> merged_tensors_to_save(const CausalLM& model, bool quantize_4bit) {
  std::vector<TensorToSave> out;
  for (auto& parameter : merged_parameters(model)) {
    // Expert stacks stay 16-bit in a 4-bit export: bitsandbytes quantizes nn.Linear layers only.
    if (add_moe_checkpoint_tensors(model, parameter, out)) continue;
    if (quantize_4bit && parameter.projection) {
      add_nf4_projection(parameter, out);
    } else {
      out.push_back({std::move(parameter.name), parameter.dtype, std::move(parameter.shape),
                     std::move(parameter.values)});
    }
  }
  return out;
}

void export_merged(const CausalLM& model, const std::string& base_model_dir, const std::string& out_dir,
                   bool quantize_4bit) {
  at::NoGradGuard no_grad;
  std::filesystem::create_directories(out_dir);

  // Split into shards in parameter order by the tensors' sizes; each tensor is merged (on the
  // model's device) and copied to the CPU only when its shard's writer reaches it.
  std::vector<std::vector<TensorToSave>> shards(1);
  int64_t shard_bytes = 0;
  for (auto& tensor : merged_tensors_to_save(model, quantize_4bit)) {
    const int64_t bytes = byte_count(tensor);
    if (shard_bytes > 0 && shard_bytes + bytes > kMaxShardBytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(std::move(tensor));
    shard_bytes += bytes;
  }
  if (shards.size() == 1) {
    save_tensors_streamed(out_dir + "/model.safetensors", shards[0], {{"format", "pt"}});
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    int64_t total_size = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      const auto file = shard_name(i, shards.size());
      for (const auto& tensor : shards[i]) {
        weight_map[tensor.name] = file;
        total_size += byte_count(tensor);
      }
      save_tensors_streamed(out_dir + "/" + file, shards[i], {{"format", "pt"}});
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
