#include "finetune/gguf/gguf_export.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "finetune/gguf/gguf_file_writer.h"
#include "finetune/gguf/gguf_quant_mix.h"
#include "finetune/gguf/gguf_tensor_names.h"
#include "finetune/gguf/gguf_vocab.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

constexpr uint32_t kGgmlQuantizationVersion = 2;  // gguf-py GGML_QUANT_VERSION

std::string last_component(const std::string& name) {
  std::string trimmed = name;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const auto slash = trimmed.rfind('/');
  return slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
}

// TextModel.set_gguf_parameters + LlamaModel's additions, in the converter's order. A file for
// llama-quantize's mixes leaves out general.file_type and general.quantization_version (the
// quantizer sets them again, which moves them to the end).
void add_model_keys(GgufFileWriter& writer, const ModelConfig& config, const std::string& arch,
                    const std::string& model_name, std::optional<GgmlType> type) {
  const auto& raw = config.raw;
  writer.add_string("general.architecture", arch);
  writer.add_string("general.type", "model");
  writer.add_string("general.name", last_component(model_name));
  writer.add_uint32(arch + ".block_count", static_cast<uint32_t>(config.num_hidden_layers));
  writer.add_uint32(arch + ".context_length", static_cast<uint32_t>(config.max_position_embeddings));
  writer.add_uint32(arch + ".embedding_length", static_cast<uint32_t>(config.hidden_size));
  writer.add_uint32(arch + ".feed_forward_length", static_cast<uint32_t>(config.intermediate_size));
  writer.add_uint32(arch + ".attention.head_count", static_cast<uint32_t>(config.num_attention_heads));
  writer.add_uint32(arch + ".attention.head_count_kv", static_cast<uint32_t>(config.num_key_value_heads));
  if (config.rope_scaling.rope_type == "linear") {
    writer.add_string(arch + ".rope.scaling.type", "linear");
    writer.add_float32(arch + ".rope.scaling.factor", static_cast<float>(config.rope_scaling.factor));
  }
  writer.add_float32(arch + ".rope.freq_base", static_cast<float>(config.rope_theta));
  writer.add_float32(arch + ".attention.layer_norm_rms_epsilon", static_cast<float>(config.rms_norm_eps));
  if (raw.contains("head_dim") && raw["head_dim"].is_number_integer()) {
    writer.add_uint32(arch + ".attention.key_length", raw["head_dim"].get<uint32_t>());
    writer.add_uint32(arch + ".attention.value_length", raw["head_dim"].get<uint32_t>());
  }
  if (type) writer.add_uint32("general.file_type", llama_file_type(*type));
  if (arch == "llama") {
    writer.add_uint32(arch + ".vocab_size", static_cast<uint32_t>(config.vocab_size));
    writer.add_uint32(arch + ".rope.dimension_count", static_cast<uint32_t>(config.head_dim));
  }
  if (type) writer.add_uint32("general.quantization_version", kGgmlQuantizationVersion);
}

// The converter's per-tensor type: F32 for 1-D tensors and norms, else the file's type, F16
// where Q8_0 cannot hold the rows.
GgmlType tensor_type(const std::string& gguf_name, const at::Tensor& tensor, GgmlType type) {
  if (tensor.dim() <= 1 || ends_with(gguf_name, "_norm.weight")) return GgmlType::kF32;
  if (!ggml_can_encode(type, tensor.size(-1))) return GgmlType::kF16;
  return type;
}

void add_tensor(GgufFileWriter& writer, const std::string& gguf_name, const at::Tensor& tensor, GgmlType type) {
  const auto data = tensor.to(at::kCPU, at::kFloat).contiguous();
  if (!at::isfinite(data).all().item<bool>()) {
    throw Error("GGUF export: tensor '" + gguf_name + "' has NaN or infinite values");
  }
  const auto chosen = tensor_type(gguf_name, data, type);
  const int64_t row_length = data.dim() == 0 ? 1 : data.size(-1);
  writer.add_tensor(gguf_name, data.sizes().vec(), static_cast<uint32_t>(chosen),
                    ggml_encode(data.data_ptr<float>(), data.numel() / row_length, row_length, chosen));
}

// The model's tensors as the converter names and lays them out: rope_freqs, then the checkpoint's
// in name order, q/k permuted. `tensors` is released as it goes.
NamedTensors gguf_tensors(const ModelConfig& config, const std::string& arch, NamedTensors& tensors) {
  NamedTensors out;
  if (const auto rope_freqs = gguf_rope_freqs(config); rope_freqs.defined()) out.emplace_back("rope_freqs.weight", rope_freqs);
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [name, tensor] : tensors) {
    at::Tensor data = tensor;
    if (const int64_t heads = gguf_permute_heads(arch, config, name); heads > 0) data = gguf_permute_qk(data, heads);
    out.emplace_back(gguf_tensor_name(name), data);
    tensor = at::Tensor();
  }
  return out;
}

// One tensor as llama-quantize writes it from the F16 file: the F16 file's values (F32 tensors as
// they are, the rest rounded to half) in the mix's type for it.
void add_quantized_tensor(GgufFileWriter& writer, const GgufQuantMix& mix, GgufMixState& state,
                          const std::string& gguf_name, const at::Tensor& tensor) {
  auto data = tensor.to(at::kCPU, at::kFloat).contiguous();
  if (!at::isfinite(data).all().item<bool>()) {
    throw Error("GGUF export: tensor '" + gguf_name + "' has NaN or infinite values");
  }
  const auto source_type = tensor_type(gguf_name, data, GgmlType::kF16);
  if (source_type == GgmlType::kF16) data = data.to(at::kHalf).to(at::kFloat);
  const int64_t row_length = data.dim() == 0 ? 1 : data.size(-1);
  const auto chosen = gguf_mix_tensor_type(mix, state, gguf_name, row_length, data.dim(), source_type);
  writer.add_tensor(gguf_name, data.sizes().vec(), static_cast<uint32_t>(chosen),
                    ggml_encode(data.data_ptr<float>(), data.numel() / row_length, row_length, chosen));
}

}  // namespace

void export_gguf_quantized(const ModelConfig& config, NamedTensors tensors, const std::string& base_model_dir,
                           const std::string& model_name, const std::string& out_path, const GgufQuantMix& mix) {
  at::NoGradGuard no_grad;
  const auto source = (std::filesystem::path(base_model_dir) / "config.json").string();
  const auto arch = gguf_architecture(config, source);
  GgufFileWriter writer;
  add_model_keys(writer, config, arch, model_name, std::nullopt);
  add_gguf_vocab(writer, base_model_dir, config.raw, config.vocab_size);
  writer.add_uint32("general.quantization_version", kGgmlQuantizationVersion);
  writer.add_uint32("general.file_type", mix.file_type);

  auto named = gguf_tensors(config, arch, tensors);
  std::stable_sort(named.begin(), named.end(),
                   [](const auto& a, const auto& b) { return gguf_quantizer_order(a.first, b.first); });
  std::vector<std::string> names;
  for (const auto& entry : named) names.push_back(entry.first);
  auto state = gguf_mix_state(names, static_cast<int>(config.num_hidden_layers),
                              gguf_is_70b(arch, config.num_hidden_layers, config.num_attention_heads,
                                          config.num_key_value_heads));
  for (auto& [name, tensor] : named) {
    add_quantized_tensor(writer, mix, state, name, tensor);
    tensor = at::Tensor();
  }
  std::filesystem::create_directories(std::filesystem::path(out_path).parent_path());
  writer.write(out_path);
}

std::string gguf_file_path(const std::string& save_path, const std::string& model_name, const std::string& label) {
  return (std::filesystem::path(save_path) / (last_component(model_name) + "." + label + ".gguf")).string();
}

std::string gguf_file_path(const std::string& save_path, const std::string& model_name, GgmlType type) {
  return gguf_file_path(save_path, model_name, ggml_type_name(type));
}

void export_gguf(const ModelConfig& config, NamedTensors tensors, const std::string& base_model_dir,
                 const std::string& model_name, const std::string& out_path, GgmlType type) {
  at::NoGradGuard no_grad;
  const auto source = (std::filesystem::path(base_model_dir) / "config.json").string();
  const auto arch = gguf_architecture(config, source);
  GgufFileWriter writer;
  add_model_keys(writer, config, arch, model_name, type);
  add_gguf_vocab(writer, base_model_dir, config.raw, config.vocab_size);
  for (auto& [name, tensor] : gguf_tensors(config, arch, tensors)) {
    add_tensor(writer, name, tensor, type);
    tensor = at::Tensor();  // release this reference as soon as the tensor is encoded
  }
  std::filesystem::create_directories(std::filesystem::path(out_path).parent_path());
  writer.write(out_path);
}

std::vector<std::string> export_gguf_files(const ModelConfig& config, NamedTensors tensors,
                                           const std::string& base_model_dir, const std::string& model_name,
                                           const std::string& save_path, const std::vector<std::string>& quantizations) {
  if (quantizations.empty()) throw UsageError("--quantization: no GGUF type given");
  std::vector<std::optional<GgufQuantMix>> mixes;
  std::vector<GgmlType> types;
  for (const auto& name : quantizations) {  // all checked first
    mixes.push_back(gguf_quant_mix(name));
    types.push_back(mixes.back() ? GgmlType::kF16 : ggml_type_from_name(name));
  }
  std::vector<std::string> written;
  for (size_t i = 0; i < types.size(); ++i) {
    // The last file takes the tensors over, so it can release each one once encoded.
    auto file_tensors = i + 1 == types.size() ? std::move(tensors) : tensors;
    if (mixes[i]) {
      const auto path = gguf_file_path(save_path, model_name, mixes[i]->label);
      export_gguf_quantized(config, std::move(file_tensors), base_model_dir, model_name, path, *mixes[i]);
      written.push_back(path);
    } else {
      const auto path = gguf_file_path(save_path, model_name, types[i]);
      export_gguf(config, std::move(file_tensors), base_model_dir, model_name, path, types[i]);
      written.push_back(path);
    }
  }
  return written;
}

}  // namespace finetune
