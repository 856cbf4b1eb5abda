// 8-bit AdamW as bitsandbytes 0.50.2 computes it: bnb.optim.AdamW with optim_bits=8, which is
// what HF's Trainer builds for optim="adamw_8bit" / "adamw_bnb_8bit" / "paged_adamw_8bit" (with
// TrainingArguments' learning rate, adam_beta1, adam_beta2, adam_epsilon and weight_decay).
//
// Note [8-bit AdamW state]
// A parameter of at least kAdamW8bitMinSize (min_8bit_size, 4096) elements keeps each moment as
// uint8 codes of the parameter's shape plus one fp32 absmax per block of kAdamW8bitBlockSize
// (256) elements: moment = code_map[code] * absmax of its block. The first moment indexes the
// signed dynamic map, the second the unsigned one (quant/blockwise_8bit.h dynamic_map). Every
// step dequantizes, updates in fp32, takes each block's new absmax and quantizes again.
// A smaller parameter keeps both moments in fp32. Checkpoint fields (bnb's state names):
//   8-bit:  "state1" uint8, "absmax1" fp32 (blocks), "state2" uint8, "absmax2" fp32 (blocks)
//   32-bit: "state1" fp32, "state2" fp32
// The step count is shared by all parameters (bnb counts per parameter; every parameter has a
// gradient at every step here, so the counts are equal).
//
// Two paths, the two bnb has:
// - reference (CPU, or any device without `cuda_kernel`): bnb's CPU backend op for op in ATen
//   (backends/cpu/ops.py _optimizer_update_8bit_blockwise_cpu and _optimizer_update_32bit_cpu):
//   moment updates, then decay, then the update; blockwise quantization byte-identical to bnb's
//   CPU kernel. Same arithmetic as bnb on the CPU, bit for bit (tests/train/test_adamw_8bit.cpp).
// - cuda_kernel: one multi-tensor launch (train/cuda/adamw_8bit_kernel.h) with the arithmetic of
//   bnb's CUDA kernels kOptimizerStatic8bit2StateBlockwise and kOptimizer32bit2State: float
//   bias corrections, the update before the decay, its own quantization search. bnb's CUDA and CPU
//   paths round differently, and ours differ in the same ways (Note [bnb's CUDA and CPU 8-bit
//   AdamW differ] in the kernel).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/train/optimizer.h"

namespace finetune {

inline constexpr int64_t kAdamW8bitBlockSize = 256;  // bnb's blocksize for optimizer state
inline constexpr int64_t kAdamW8bitMinSize = 4096;   // bnb's min_8bit_size

// Its state layout (Note [Optimizer state layout], Note [8-bit AdamW state]).
std::vector<StateTensorSpec> adamw_8bit_state_layout(const at::Tensor& parameter);

class AdamW8bit final : public Optimizer {
 public:
  // `cuda_kernel`: the parameters are fp32 CUDA tensors and the multi-tensor kernel runs.
  AdamW8bit(std::vector<at::Tensor> parameters, AdamWOptions options, bool cuda_kernel);

  void step(double lr) override;
  int64_t steps_taken() const override { return step_count_; }
  OptimizerState state() const override;
  void load_state(const OptimizerState& state) override;

 private:
  // One parameter's state; absmax undefined for a small (fp32-state) parameter.
  struct Moments {
    at::Tensor state1, absmax1, state2, absmax2;
    bool blockwise() const { return absmax1.defined(); }
  };
  struct KernelLaunch;  // the CUDA kernel's tensor table (adamw_8bit_cuda.cpp)

  void step_reference(double lr);
  void start_kernel();  // adamw_8bit_cuda.cpp, as is step_kernel
  void step_kernel(double lr);

  std::vector<at::Tensor> parameters_;
  std::vector<Moments> moments_;
  at::Tensor signed_map_, unsigned_map_;  // 256 fp32 each, on the parameters' device
  AdamWOptions options_;
  int64_t step_count_ = 0;
  std::shared_ptr<KernelLaunch> kernel_;  // null on the reference path (shared_ptr: an incomplete type here)
};

}  // namespace finetune
