#include "finetune/weights/tensor_io.h"

#include <algorithm>
#include <memory>

#include "finetune/util/errors.h"

namespace finetune {

namespace {

// What a missing tensor was looked for in: the single file, or the shards' index.
std::string checkpoint_name(const CheckpointFiles& files) {
  if (files.files().size() == 1) return files.files().front()->path();
  return files.dir() + "/model.safetensors.index.json";
}

}  // namespace

at::ScalarType scalar_type_of(DType dtype) {
  switch (dtype) {
    case DType::F64: return at::kDouble;
    case DType::F32: return at::kFloat;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::I64: return at::kLong;
    case DType::I32: return at::kInt;
    case DType::I16: return at::kShort;
    case DType::I8: return at::kChar;
    case DType::U8: return at::kByte;
    case DType::BOOL: return at::kBool;
  }
  throw Error("unknown safetensors dtype");
}

DType dtype_of(at::ScalarType type, const std::string& context) {
  switch (type) {
    case at::kDouble: return DType::F64;
    case at::kFloat: return DType::F32;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    case at::kLong: return DType::I64;
    case at::kInt: return DType::I32;
    case at::kShort: return DType::I16;
    case at::kChar: return DType::I8;
    case at::kByte: return DType::U8;
    case at::kBool: return DType::BOOL;
    default: throw Error(context + ": dtype " + std::string(c10::toString(type)) + " cannot be saved as safetensors");
  }
}

at::Tensor tensor_view(const SafetensorsFile& file, const TensorInfo& info) {
  auto options = at::TensorOptions().dtype(scalar_type_of(info.dtype));
  if (info.end == info.begin) return at::empty(info.shape, options);
  return at::from_blob(const_cast<void*>(file.data(info)), info.shape, options);
}

void save_tensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                  const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> host;  // keeps the CPU copies alive while writing
  std::vector<TensorView> views;
  host.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    host.push_back(tensor.detach().to(at::kCPU).contiguous());
    const auto& cpu = host.back();
    views.push_back({name, dtype_of(cpu.scalar_type(), path + ": " + name),
                     std::vector<int64_t>(cpu.sizes().begin(), cpu.sizes().end()), cpu.data_ptr()});
  }
  write_safetensors(path, views, metadata);
}

void save_tensors_streamed(const std::string& path, const std::vector<TensorToSave>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSource> sources;
  sources.reserve(tensors.size());
  for (const auto& tensor : tensors) {
    const auto context = path + ": " + tensor.name;
    sources.push_back({tensor.name, dtype_of(tensor.dtype, context), tensor.shape, [&tensor, context] {
                         auto cpu = std::make_shared<at::Tensor>(tensor.values().detach().to(at::kCPU).contiguous());
                         if (cpu->scalar_type() != tensor.dtype || cpu->sizes().vec() != tensor.shape) {
                           throw Error(context + ": made as " + std::string(c10::toString(cpu->scalar_type())) + " " +
                                       shape_to_string(cpu->sizes().vec()) + ", declared " +
                                       std::string(c10::toString(tensor.dtype)) + " " + shape_to_string(tensor.shape));
                         }
                         return std::shared_ptr<const void>(cpu, cpu->data_ptr());
                       }});
  }
  write_safetensors_streamed(path, sources, metadata);
}

std::map<std::string, at::Tensor> load_tensors(const std::string& path) {
  auto file = SafetensorsFile::open(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& info : file.tensors()) out[info.name] = tensor_view(file, info).clone();
  return out;
}

at::Tensor weight_view(const CheckpointFiles& files, const std::string& name, at::IntArrayRef expected_shape) {
  if (!files.contains(name)) {
    throw Error(checkpoint_name(files) + ": checkpoint is missing tensor '" + name +
                "' (does config.json match the weights?)");
  }
  const auto& file = files.file_of(name);
  auto source = tensor_view(file, files.info(name));
  if (!source.sizes().equals(expected_shape)) {
    throw Error(file.path() + ": tensor '" + name + "' has shape " + shape_to_string(source.sizes().vec()) +
                " but the model (config.json) expects " + shape_to_string(expected_shape.vec()));
  }
  if (!at::isFloatingType(source.scalar_type())) {
    throw Error(file.path() + ": tensor '" + name + "' is not a floating-point tensor");
  }
  return source;
}

void copy_weight(at::Tensor target, const CheckpointFiles& files, const std::string& name, int64_t block_bytes) {
  const auto source = weight_view(files, name, target.sizes());
  const auto& file = files.file_of(name);
  if (source.dim() == 0 || source.numel() == 0) {
    target.copy_(source);
    release_weight(files, name);
    return;
  }
  const int64_t rows = source.size(0);
  const int64_t row_bytes = source.numel() / rows * static_cast<int64_t>(source.element_size());
  const int64_t block_rows = std::max<int64_t>(1, block_bytes / row_bytes);
  for (int64_t first = 0; first < rows; first += block_rows) {
    const int64_t count = std::min(block_rows, rows - first);
    const auto block = source.narrow(0, first, count);  // a contiguous run of the mapped bytes
    target.narrow(0, first, count).copy_(block);  // synchronous: the block is read when this returns
    file.release_pages(block.data_ptr(), static_cast<size_t>(count * row_bytes));
  }
}

void release_weight(const CheckpointFiles& files, const std::string& name) {
  const auto& info = files.info(name);
  const auto& file = files.file_of(name);
  file.release_pages(file.data(info), info.end - info.begin);
}

}  // namespace finetune
