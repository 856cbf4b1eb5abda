#include "finetune/gguf/gguf_lora_export.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>

#include "finetune/gguf/gguf_export.h"
#include "finetune/gguf/gguf_file_writer.h"
#include "finetune/gguf/gguf_quant_mix.h"
#include "finetune/gguf/gguf_tensor_names.h"
#include "finetune/model/architecture.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

constexpr uint32_t kGgmlQuantizationVersion = 2;  // gguf-py GGML_QUANT_VERSION

struct LoraTensor {
  std::string gguf_name;
  at::Tensor values;  // (rows, row_length) float32 on the CPU
  GgmlType type;
};

// The projections' lora_a / lora_b tensors in the converter's order and layout.
std::vector<LoraTensor> lora_tensors(const ModelConfig& config, const std::string& arch,
                                     std::vector<GgufLoraProjection> projections, GgmlType type) {
  const Architecture& architecture = architecture_of(config);
  std::sort(projections.begin(), projections.end(),
            [](const auto& a, const auto& b) { return a.weight_name < b.weight_name; });
  std::vector<LoraTensor> out;
  for (auto& projection : projections) {
    const auto name = gguf_tensor_name(architecture, projection.weight_name);
    at::Tensor lora_B = projection.lora_B;
    // The base weight's rows are permuted (gguf_tensor_names.h); the update B A must be too.
    if (const int64_t heads = gguf_permute_heads(arch, config, projection.weight_name); heads > 0) {
      lora_B = gguf_permute_qk(lora_B, heads);
    }
    const std::pair<const char*, at::Tensor> parts[] = {{".lora_a", projection.lora_A}, {".lora_b", lora_B}};
    for (const auto& [suffix, tensor] : parts) {
      if (tensor.dim() != 2) throw Error("GGUF LoRA export: " + projection.weight_name + suffix + " is not a matrix");
      const auto values = tensor.to(at::kCPU, at::kFloat).contiguous();
      if (!at::isfinite(values).all().item<bool>()) {
        throw Error("GGUF LoRA export: tensor '" + name + suffix + "' has NaN or infinite values");
      }
      out.push_back({name + suffix, values, gguf_converter_tensor_type(name + suffix, 2, values.size(1), type)});
    }
  }
  return out;
}

void write_lora_file(const LoraConfig& lora, const std::string& arch,
                     const std::vector<LoraTensor>& tensors, const std::string& model_name, const std::string& path) {
  GgufFileWriter writer;
  writer.add_string("general.architecture", arch);
  writer.add_string("general.type", "adapter");
  writer.add_string("adapter.type", "lora");
  writer.add_string("general.name", gguf_model_name(model_name));
  writer.add_float32("adapter.lora.alpha", static_cast<float>(gguf_lora_alpha(lora)));
  writer.add_uint32("general.quantization_version", kGgmlQuantizationVersion);
  std::vector<size_t> index;
  for (const auto& tensor : tensors) {
    const int64_t row_length = tensor.values.size(1);
    index.push_back(writer.add_tensor_info(tensor.gguf_name, tensor.values.sizes().vec(),
                                           static_cast<uint32_t>(tensor.type),
                                           ggml_row_bytes(tensor.type, row_length) * tensor.values.size(0)));
  }
  writer.begin(path);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& values = tensors[i].values;
    const auto bytes = ggml_encode(values.data_ptr<float>(), values.size(0), values.size(1), tensors[i].type);
    writer.write_tensor_data(index[i], 0, bytes.data(), bytes.size());
  }
  writer.finish();
}

}  // namespace

double gguf_lora_alpha(const LoraConfig& lora) {
  return lora.use_rslora ? lora.lora_alpha * std::sqrt(static_cast<double>(lora.r)) : lora.lora_alpha;
}

std::string gguf_lora_file_path(const std::string& save_path, const std::string& model_name, GgmlType type) {
  return gguf_file_path(save_path, model_name, "LoRA-" + ggml_type_name(type));
}

std::vector<std::string> export_gguf_lora(const ModelConfig& config, const LoraConfig& lora,
                                          std::vector<GgufLoraProjection> projections,
                                          const std::string& base_model_dir, const std::string& model_name,
                                          const std::string& save_path, const std::vector<std::string>& quantizations) {
  if (quantizations.empty()) throw UsageError("--quantization: no GGUF type given");
  std::vector<GgmlType> types;
  for (const auto& name : quantizations) {  // all checked first
    if (gguf_quant_mix(name)) {
      throw UsageError("--quantization: '" + name + "' is a llama-quantize mix; a LoRA GGUF is f32, f16, bf16 or q8_0 " +
                       "(convert_lora_to_gguf.py's --outtype)");
    }
    types.push_back(ggml_type_from_name(name));
  }
  if (lora.use_dora) throw UsageError("--save_method gguf_lora: llama.cpp has no DoRA adapters (use gguf for the merged model)");
  if (!lora.target_parameters.empty()) {
    throw UsageError("--save_method gguf_lora: the adapter trains expert stacks (--target_parameters " +
                     join(lora.target_parameters, ",") + "), which a GGUF LoRA adapter of lora_a/lora_b matrices "
                     "cannot carry; export merged (gguf) instead");
  }
  if (projections.empty()) throw Error("GGUF LoRA export: the model has no LoRA adapter");
  at::NoGradGuard no_grad;
  const auto arch = gguf_architecture(config, (std::filesystem::path(base_model_dir) / "config.json").string());
  std::filesystem::create_directories(save_path);
  std::vector<std::string> paths;
  for (GgmlType type : types) {
    const auto tensors = lora_tensors(config, arch, projections, type);
    paths.push_back(gguf_lora_file_path(save_path, model_name, type));
    write_lora_file(lora, arch, tensors, model_name, paths.back());
  }
  return paths;
}

}  // namespace finetune
