// bitsandbytes builds its CUDA kernels with --use_fast_math: every fp32 op flushes subnormal inputs
// and results to (sign-preserving) zero, divisions and reciprocals are the hardware
// approximations, square roots and __powf too, and ptxas then fuses some products and sums into
// FMAs. Which rounding each step of its kernels gets was read off bnb's own machine code (its
// csrc/kernels.cu built by nvcc 13.0 with bnb's flags for sm_90, disassembled). Our kernels are
// built without fast math, so the ones that must give bitsandbytes' CUDA bytes (the NF4
// quantizer, quant/cuda; the 8-bit AdamW step, train/cuda) spell that arithmetic out here in PTX
// that ptxas takes as written (.rn: not contracted further; .ftz: subnormals flushed; .approx:
// the hardware approximations), independent of build flags. Plain CUDA, no LibTorch.
#pragma once

namespace finetune::cuda_kernels {

// x with a subnormal flushed to zero, as a fast-math op sees its input.
__device__ __forceinline__ float flush_ftz(float x) {
  float y;
  asm("mul.rn.ftz.f32 %0, %1, 0f3F800000;" : "=f"(y) : "f"(x));
  return y;
}

// `1.0f / x` under fast math: rcp.approx, not always the correctly rounded reciprocal.
__device__ __forceinline__ float reciprocal_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float mul_ftz(float a, float b) {
  float y;
  asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

__device__ __forceinline__ float sub_ftz(float a, float b) {
  float y;
  asm("sub.rn.ftz.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

__device__ __forceinline__ float fma_ftz(float a, float b, float c) {  // a * b + c, rounded once
  float y;
  asm("fma.rn.ftz.f32 %0, %1, %2, %3;" : "=f"(y) : "f"(a), "f"(b), "f"(c));
  return y;
}

__device__ __forceinline__ float sqrt_approx(float x) {
  float y;
  asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float divide_approx(float a, float b) {  // __fdividef and fast-math a / b
  float y;
  asm("div.approx.ftz.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

__device__ __forceinline__ float pow_approx(float x, float y) {  // __powf: 2^(y * log2 x)
  float log, power;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(log) : "f"(x));
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(power) : "f"(mul_ftz(log, y)));
  return power;
}

}  // namespace finetune::cuda_kernels
