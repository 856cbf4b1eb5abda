// bitsandbytes builds its CUDA kernels with --use_fast_math: every fp32 op flushes subnormal inputs
// and results to (sign-preserving) zero, and `1.0f / x` compiles to rcp.approx.ftz.f32, which is
// not always the correctly rounded reciprocal. Our kernels are built without fast math, so the
// kernels that must give bitsandbytes' CUDA bytes spell that arithmetic out here. `.rn` on the
// multiply keeps ptxas from contracting it into an FMA (bitsandbytes' products feed comparisons,
// stores and conversions, never an add).
#pragma once

namespace finetune::cuda_kernels {

// x with a subnormal flushed to zero, as a fast-math op sees its input.
__device__ __forceinline__ float bnb_flush(float x) {
  float y;
  asm("mul.rn.ftz.f32 %0, %1, 0f3F800000;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float bnb_reciprocal(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float bnb_multiply(float a, float b) {
  float y;
  asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

}  // namespace finetune::cuda_kernels
