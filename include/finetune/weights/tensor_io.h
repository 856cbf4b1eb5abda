// Bridges between safetensors' raw tensors (io/safetensors.h, LibTorch-free) and at::Tensor.
#pragma once

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

// Writes named tensors (any device/dtype; copied to contiguous CPU) atomically.
void save_tensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                  const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of a file into owned CPU tensors.
std::map<std::string, at::Tensor> load_tensors(const std::string& path);

}  // namespace finetune
