// Bridges between safetensors' raw tensors (io/safetensors.h, LibTorch-free) and at::Tensor.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/io/safetensors.h"

namespace finetune {

at::ScalarType scalar_type_of(DType dtype);
DType dtype_of(at::ScalarType type, const std::string& context);

// A CPU tensor viewing the mapped bytes (no copy): valid while `file` is alive.
at::Tensor tensor_view(const SafetensorsFile& file, const TensorInfo& info);

// The model weight `name` as a view of the checkpoint (valid while `files` is alive); errors name
// the file (or the shards' index) and the tensor when it is missing, not floating-point, or not
// of the shape the model (config.json) expects.
at::Tensor weight_view(const CheckpointFiles& files, const std::string& name, at::IntArrayRef expected_shape);

// Copies the model weight `name` (checked as weight_view does) into `target` (target's device and
// dtype; its shape) a block of rows (along dim 0) at a time, giving each block's mapped pages back
// once copied (SafetensorsFile::release_pages): the load holds the model's own copy and one block of
// the file, not every tensor's pages until the checkpoint closes. A block is `block_bytes` of the
// checkpoint's bytes, or one row when a row is larger.
constexpr int64_t kWeightCopyBlockBytes = int64_t{64} << 20;
void copy_weight(at::Tensor target, const CheckpointFiles& files, const std::string& name,
                 int64_t block_bytes = kWeightCopyBlockBytes);

// Gives back the mapped pages of the checkpoint tensor `name` once it has been read.
void release_weight(const CheckpointFiles& files, const std::string& name);

// Writes named tensors (any device/dtype; copied to contiguous CPU) atomically.
void save_tensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                  const std::map<std::string, std::string>& metadata = {});

// A tensor to save whose values are made when the writer reaches it (any device; its dtype and
// shape declared beforehand, checked when made). Called once.
struct TensorToSave {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  std::function<at::Tensor()> values;
};

// save_tensors' file, holding one tensor's CPU copy at a time (write_safetensors_streamed).
void save_tensors_streamed(const std::string& path, const std::vector<TensorToSave>& tensors,
                           const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of a file into owned CPU tensors.
std::map<std::string, at::Tensor> load_tensors(const std::string& path);

}  // namespace finetune
