#include "finetune/gguf/gguf_export.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>

#include "finetune/gguf/gguf_file_writer.h"
#include "finetune/gguf/gguf_model_keys.h"
#include "finetune/gguf/gguf_quant_mix.h"
#include "finetune/gguf/gguf_tensor_names.h"
#include "finetune/gguf/gguf_vocab.h"
#include "finetune/model/architecture.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

constexpr uint32_t kGgmlQuantizationVersion = 2;  // gguf-py GGML_QUANT_VERSION
constexpr int64_t kBlockValues = int64_t{1} << 22;  // values per block of rows encoded at a time (16 MiB as f32)

// A tensor as the converter names and lays it out: its GGUF name, shape, q/k permutation, and
// where its values come from.
struct ExportTensor {
  std::string gguf_name;
  std::vector<int64_t> shape;
  int64_t permute_heads = 0;  // gguf_permute_heads
  std::function<at::Tensor()> values;

  int64_t row_length() const { return shape.empty() ? 1 : shape.back(); }
  int64_t rows() const {
    int64_t count = 1;
    for (int64_t size : shape) count *= size;
    return count / row_length();
  }
};

// A source tensor's values for the GGUF tensors cut from it (an expert stack's gate and up rows):
// fetched when the first part asks, released once every part has taken its rows.
struct SharedValues {
  std::function<at::Tensor()> fetch;
  at::Tensor values;
  size_t parts_left = 0;

  at::Tensor take() {
    if (!values.defined()) values = fetch();
    auto out = values;
    if (--parts_left == 0) {
      values = at::Tensor();
      fetch = nullptr;
    }
    return out;
  }
};

// The GGUF tensors of one source tensor (gguf_tensor_parts), each with its converter position.
void add_source_tensor(const Architecture& architecture, const ModelConfig& config, GgufSourceTensor& tensor,
                       std::vector<std::pair<GgufTensorPart, ExportTensor>>& out) {
  auto parts = gguf_tensor_parts(architecture, config, tensor.name);
  const int64_t permute_heads = gguf_permute_heads(architecture.gguf_architecture, config, tensor.name);
  if (gguf_shifts_norm(architecture, tensor.name)) {
    tensor.values = [values = std::move(tensor.values)] { return gguf_shift_norm(values()); };
  }
  if (parts.size() == 1 && parts.front().rows == 0) {
    out.push_back({parts.front(), {parts.front().gguf_name, tensor.shape, permute_heads, std::move(tensor.values)}});
    return;
  }
  auto shared = std::make_shared<SharedValues>(SharedValues{std::move(tensor.values), {}, parts.size()});
  for (auto& part : parts) {
    auto shape = tensor.shape;
    shape.at(1) = part.rows;
    auto values = [shared, begin = part.row_begin, rows = part.rows] {
      return shared->take().narrow(1, begin, rows);
    };
    out.push_back({part, {part.gguf_name, shape, permute_heads, std::move(values)}});
  }
}

// The converter's extra tensors (rope_freqs, Phi-3's rope factors), then the source's tensors in
// the converter's order (HF name order; a MoE model's as Note [GGUF expert tensors] says), with
// its modify_tensors' changes: Gemma's norms as 1 + w, Gemma-3's token_embd cut to the
// vocabulary's rows, expert stacks split into gate and up.
std::vector<ExportTensor> export_tensors(const ModelConfig& config, const std::string& arch, GgufTensorSource source,
                                         const std::string& base_model_dir) {
  const Architecture& architecture = architecture_of(config);
  std::vector<ExportTensor> out;
  for (auto& [name, values] : gguf_extra_tensors(config, arch)) {
    out.push_back({name, values.sizes().vec(), 0, [values = values] { return values; }});
  }
  std::vector<std::pair<GgufTensorPart, ExportTensor>> parts;
  for (auto& tensor : source) add_source_tensor(architecture, config, tensor, parts);
  std::stable_sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first.converter_position, a.first.converter_rank) <
           std::tie(b.first.converter_position, b.first.converter_rank);
  });
  std::optional<int64_t> token_rows;
  if (arch == "gemma3") token_rows = gguf_gemma3_token_rows(base_model_dir);
  for (auto& [part, exported] : parts) {
    if (exported.gguf_name == "token_embd.weight" && token_rows && *token_rows < exported.shape.front()) {
      exported.shape.front() = *token_rows;
      exported.values = [values = std::move(exported.values), rows = *token_rows] { return values().narrow(0, 0, rows); };
    }
    out.push_back(std::move(exported));
  }
  return out;
}

GgmlType converter_tensor_type(const ExportTensor& tensor, GgmlType type) {
  return gguf_converter_tensor_type(tensor.gguf_name, tensor.shape.size(), tensor.row_length(), type);
}

// One output file: its writer (header planned), and per export tensor its index in the writer,
// its type, and whether its values are first rounded to half (a quantizer file reads the F16
// file's values).
struct PlannedFile {
  std::string path;
  GgufFileWriter writer;
  std::vector<size_t> index;
  std::vector<GgmlType> types;
  std::vector<bool> round_to_half;
};

void declare_tensor(PlannedFile& file, const ExportTensor& tensor, size_t i, GgmlType type, bool round_to_half) {
  file.types[i] = type;
  file.round_to_half[i] = round_to_half;
  file.index[i] = file.writer.add_tensor_info(tensor.gguf_name, tensor.shape, static_cast<uint32_t>(type),
                                              ggml_row_bytes(type, tensor.row_length()) * tensor.rows());
}

std::unique_ptr<PlannedFile> plan_file(const ModelConfig& config, const std::string& arch,
                                       const std::vector<ExportTensor>& tensors, const std::string& base_model_dir,
                                       const std::string& model_name, const std::string& path,
                                       const std::optional<GgufQuantMix>& mix, GgmlType type) {
  auto file = std::make_unique<PlannedFile>();
  file->path = path;
  file->index.resize(tensors.size());
  file->types.resize(tensors.size());
  file->round_to_half.resize(tensors.size());
  auto& writer = file->writer;
  add_gguf_model_keys(writer, config, arch, model_name, mix ? std::optional<GgmlType>() : std::optional<GgmlType>(type));
  add_gguf_vocab(writer, base_model_dir, config.raw, config.vocab_size);
  if (!mix) {
    for (size_t i = 0; i < tensors.size(); ++i) declare_tensor(*file, tensors[i], i, converter_tensor_type(tensors[i], type), false);
    return file;
  }
  writer.add_uint32("general.quantization_version", kGgmlQuantizationVersion);
  writer.add_uint32("general.file_type", mix->file_type);
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return gguf_quantizer_order(tensors[a].gguf_name, tensors[b].gguf_name);
  });
  std::vector<std::string> names;
  for (size_t i : order) names.push_back(tensors[i].gguf_name);
  const int64_t n_expert = config.moe ? config.moe->num_experts : 0;
  auto state = gguf_mix_state(names, static_cast<int>(config.num_hidden_layers), static_cast<int>(n_expert),
                              gguf_is_70b(arch, config.num_hidden_layers, config.num_attention_heads,
                                          config.num_key_value_heads, n_expert));
  for (size_t i : order) {
    const auto& tensor = tensors[i];
    const auto source_type = converter_tensor_type(tensor, GgmlType::kF16);
    const auto chosen = gguf_mix_tensor_type(*mix, state, tensor.gguf_name, tensor.row_length(),
                                             static_cast<int64_t>(tensor.shape.size()), source_type);
    declare_tensor(*file, tensor, i, chosen, source_type == GgmlType::kF16);
  }
  return file;
}

// The tensor's values, permuted as the converter does, as (rows, row_length).
at::Tensor fetch_rows(ExportTensor& tensor) {
  at::Tensor data = tensor.values();
  tensor.values = nullptr;  // the source's reference goes once fetched
  if (data.sizes().vec() != tensor.shape) {
    std::ostringstream message;
    message << "GGUF export: tensor '" << tensor.gguf_name << "' has shape " << data.sizes() << ", its header says "
            << at::IntArrayRef(tensor.shape);
    throw Error(message.str());
  }
  if (tensor.permute_heads > 0) data = gguf_permute_qk(data, tensor.permute_heads);
  return data.reshape({tensor.rows(), tensor.row_length()});
}

// Encodes tensor `i` into every file, a block of rows at a time.
void write_tensor(std::vector<std::unique_ptr<PlannedFile>>& files, ExportTensor& tensor, size_t i) {
  const auto rows = fetch_rows(tensor);
  const int64_t row_length = tensor.row_length();
  const int64_t block_rows = std::max<int64_t>(1, kBlockValues / row_length);
  for (int64_t first = 0; first < tensor.rows(); first += block_rows) {
    const int64_t count = std::min(block_rows, tensor.rows() - first);
    const auto block = rows.narrow(0, first, count).to(at::kCPU, at::kFloat).contiguous();  // (count, row_length)
    if (!at::isfinite(block).all().item<bool>()) {
      throw Error("GGUF export: tensor '" + tensor.gguf_name + "' has NaN or infinite values");
    }
    at::Tensor half_rounded;
    for (auto& file : files) {
      const at::Tensor* values = &block;
      if (file->round_to_half[i]) {
        if (!half_rounded.defined()) half_rounded = block.to(at::kHalf).to(at::kFloat);
        values = &half_rounded;
      }
      const auto type = file->types[i];
      const auto bytes = ggml_encode(values->data_ptr<float>(), count, row_length, type);
      file->writer.write_tensor_data(file->index[i], ggml_row_bytes(type, row_length) * first, bytes.data(),
                                     bytes.size());
    }
  }
}

// finish() each file; when one fails, the ones already renamed into place are removed again.
void finish_files(std::vector<std::unique_ptr<PlannedFile>>& files) {
  for (size_t i = 0; i < files.size(); ++i) {
    try {
      files[i]->writer.finish();
    } catch (...) {
      std::error_code ignored;
      for (size_t j = 0; j < i; ++j) std::filesystem::remove(files[j]->path, ignored);
      throw;
    }
  }
}

}  // namespace

GgmlType gguf_converter_tensor_type(const std::string& gguf_name, size_t dims, int64_t row_length, GgmlType type) {
  if (dims <= 1 || ends_with(gguf_name, "_norm.weight") || ends_with(gguf_name, "ffn_gate_inp.weight")) {
    return GgmlType::kF32;
  }
  if (!ggml_can_encode(type, row_length)) return GgmlType::kF16;
  return type;
}

std::string gguf_model_name(const std::string& model_name) {
  std::string trimmed = model_name;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const auto slash = trimmed.rfind('/');
  return slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
}

std::string gguf_file_path(const std::string& save_path, const std::string& model_name, const std::string& label) {
  return (std::filesystem::path(save_path) / (gguf_model_name(model_name) + "." + label + ".gguf")).string();
}

std::vector<std::string> export_gguf_files(const ModelConfig& config, GgufTensorSource source,
                                           const std::string& base_model_dir, const std::string& model_name,
                                           const std::string& save_path, const std::vector<std::string>& quantizations) {
  if (quantizations.empty()) throw UsageError("--quantization: no GGUF type given");
  at::NoGradGuard no_grad;
  std::vector<std::optional<GgufQuantMix>> mixes;
  std::vector<GgmlType> types;
  for (const auto& name : quantizations) {  // all checked first
    mixes.push_back(gguf_quant_mix(name));
    types.push_back(mixes.back() ? GgmlType::kF16 : ggml_type_from_name(name));
  }
  const auto config_path = (std::filesystem::path(base_model_dir) / "config.json").string();
  const auto arch = gguf_architecture(config, config_path);
  check_gguf_model_representable(config, arch, config_path);
  auto tensors = export_tensors(config, arch, std::move(source), base_model_dir);
  std::vector<std::unique_ptr<PlannedFile>> files;
  std::vector<std::string> paths;
  for (size_t i = 0; i < types.size(); ++i) {
    const auto label = mixes[i] ? mixes[i]->label : ggml_type_name(types[i]);
    paths.push_back(gguf_file_path(save_path, model_name, label));
    files.push_back(plan_file(config, arch, tensors, base_model_dir, model_name, paths.back(), mixes[i], types[i]));
  }
  std::filesystem::create_directories(save_path);
  for (auto& file : files) file->writer.begin(file->path);
  for (size_t i = 0; i < tensors.size(); ++i) write_tensor(files, tensors[i], i);
  finish_files(files);
  return paths;
}

}  // namespace finetune
