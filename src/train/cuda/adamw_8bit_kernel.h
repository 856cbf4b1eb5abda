// Launcher of the multi-tensor 8-bit AdamW step (adamw_8bit_kernel.cu); plain CUDA.
// Every parameter's update in one launch: the tensors are cut into chunks of
// kAdamW8bitChunkSize elements (one bnb block each) and `chunk_tensor` says whose chunk each is.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace finetune::cuda_kernels {

constexpr int64_t kAdamW8bitChunkSize = 256;  // = bnb's state blocksize: one absmax per chunk

// One parameter of the launch (device pointers; fp32 parameter and gradient, contiguous).
struct AdamW8bitTensor {
  float* param;
  const float* grad;
  void* state1;     // blockwise: uint8 codes into the signed map; else fp32 first moment
  void* state2;     // blockwise: uint8 codes into the unsigned map; else fp32 second moment
  float* absmax1;   // (chunks) blockwise only, else null
  float* absmax2;
  int64_t numel;
  int64_t first_chunk;  // its first chunk's index in the launch
  int32_t blockwise;    // 1: 8-bit blockwise state; 0: fp32 state (a parameter under min_8bit_size)
  int32_t padding = 0;
};

// The step's scalars as bnb's kernels take them (float; the step as int).
struct AdamW8bitScalars {
  float beta1, beta2, eps, lr, weight_decay;
  int step;  // 1-based, after this update
};

// One AdamW step of every tensor: `tensors` (device array), `chunk_tensor` (device, `chunk_count`
// entries: the index into `tensors` of each chunk's tensor, a tensor's chunks consecutive from its
// first_chunk), `signed_map` / `unsigned_map` (device, 256 fp32 each). Launched on `stream`; the
// current device must be the tensors'.
cudaError_t adamw_8bit_step(const AdamW8bitTensor* tensors, const int32_t* chunk_tensor, int64_t chunk_count,
                            const float* signed_map, const float* unsigned_map, AdamW8bitScalars scalars,
                            cudaStream_t stream);

}  // namespace finetune::cuda_kernels
