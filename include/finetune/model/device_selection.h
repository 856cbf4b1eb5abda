// --device / --dtype resolution: "auto" means the local GPU (by local rank) when LibTorch sees
// one, else the CPU; bf16 on CUDA and fp32 on CPU. The dtype spellings are dtype_names.h's.
#pragma once

#include <string>

#include <ATen/ATen.h>

namespace finetune {

at::Device select_device(const std::string& device_option, int local_rank);
at::ScalarType select_dtype(const std::string& dtype_option, const at::Device& device);
std::string dtype_string(at::ScalarType dtype);  // HF spelling: bfloat16|float16|float32
bool is_half_precision(at::ScalarType dtype);    // bfloat16 or float16

}  // namespace finetune
