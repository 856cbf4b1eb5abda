// The 8-bit AdamW step of every parameter in one launch, element for element the arithmetic of
// bitsandbytes' CUDA kernels (csrc/kernels.cu): kOptimizerStatic8bit2StateBlockwise for
// parameters with 8-bit blockwise state, kOptimizer32bit2State for the small ones with fp32
// state (Note [bnb's fast-math arithmetic]).
//
// Layout: a warp owns one chunk of 256 elements (one bnb block, one absmax), lane L its elements
// L, L + 32, ..., L + 224 (coalesced loads, no alignment needed, so gradients that are views into
// a bucket buffer at any offset are fine); the block's new absmax is a warp max-reduction. A grid
// of resident blocks strides over all chunks of all tensors; each block copies the two code maps
// into shared memory once, also as search trees (kernels/dynamic_map_search.h).
//
// Note [bnb's CUDA and CPU 8-bit AdamW differ]
// bnb's CUDA kernel and its CPU backend (which the reference path of adamw_8bit.cpp repeats)
// compute different roundings of the same update, and so do ours:
// - bias corrections in float with __powf (CUDA) vs double with pow (CPU); 1 - beta in float
//   (1 - 0.9f = 0.100000024) vs the double 1 - 0.9 rounded to 0.1f by ATen;
// - CUDA adds step_size * m / (sqrt(v) + correction2 * eps) and then decays, p' = (p + u)(1 - lr wd);
//   the CPU decays first, p' = p (1 - lr wd) + u (a difference of u * lr * wd);
// - quantization: CUDA searches the map (binary search, the nearer of the last two candidates by
//   their midpoint) and moves a first-moment code whose value has the wrong sign one code towards
//   the right sign; bnb's CPU kernel rounds x / absmax to one of 65536 bins over [-1, 1] and takes
//   the code nearest to the bin's value. Near a midpoint the two pick neighbouring codes; below
//   ~1.5e-5 of the block's absmax, where the map's codes are closer together than a bin, they
//   part: the CPU stores 0 (and anything below ~1.5e-5) as 1.56e-5 x absmax (second moment) or
//   2.1e-5 x absmax (first), CUDA as 0 or the nearest tiny code. A second moment stored as 0 makes
//   the next update of an element with a near-zero gradient m / eps-sized on CUDA, so the two
//   paths' updates of such elements are unrelated (tests/train/test_adamw_8bit_cuda.cpp keeps its
//   gradients away from zero);
// - a partial last block: CUDA pads it with gradient 0, first-moment code 128 (5.5e-7 of the old
//   absmax) and second-moment code 0, which can only matter when every real element is smaller;
// - a non-finite gradient: CUDA zeroes that element's moments and leaves the parameter; the CPU
//   propagates the NaN (the trainer stops the run on a non-finite gradient norm either way).
#include "adamw_8bit_kernel.h"

#include <algorithm>
#include <cfloat>

#include "finetune/kernels/bnb_fast_math.cuh"
#include "finetune/kernels/dynamic_map_search.h"

namespace finetune::cuda_kernels {
namespace {

constexpr int kWarpSize = 32;
constexpr int kThreads = 256;  // also the map size: thread t copies entry t
constexpr int kWarpsPerBlock = kThreads / kWarpSize;
constexpr int kPerLane = static_cast<int>(kAdamW8bitChunkSize) / kWarpSize;  // 8
constexpr int kMapSize = kDynamicMapSize;

// Note [bnb's fast-math arithmetic]

struct KernelArgs {
  const AdamW8bitTensor* tensors;
  const int32_t* chunk_tensor;
  int64_t chunk_count;
  const float* signed_map;
  const float* unsigned_map;
  AdamW8bitScalars s;
};

// bnb's gradient scale (gnorm_scale): 1, but its multiplication flushes a subnormal gradient.
constexpr float kGradientScale = 1.0f;

// The step's scalars, computed as both bnb kernels compute them.
struct StepConstants {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay;
  float correction2;  // sqrt(1 - beta2^step)
  float step_size;    // -lr * correction2 / correction1
  float decay;        // 1 - lr * weight_decay, fused by ptxas into one rounding
};

__device__ StepConstants step_constants(const AdamW8bitScalars& s) {
  StepConstants c;
  const float step = static_cast<float>(s.step);
  c.beta1 = s.beta1;
  c.beta2 = s.beta2;
  c.one_minus_beta1 = sub_ftz(1.0f, s.beta1);
  c.one_minus_beta2 = sub_ftz(1.0f, s.beta2);
  c.eps = s.eps;
  c.weight_decay = s.weight_decay;
  const float correction1 = sub_ftz(1.0f, pow_approx(s.beta1, step));
  c.correction2 = sqrt_approx(sub_ftz(1.0f, pow_approx(s.beta2, step)));
  c.step_size = divide_approx(-mul_ftz(c.correction2, s.lr), correction1);
  c.decay = fma_ftz(-s.lr, s.weight_decay, 1.0f);
  return c;
}

// p + step_size * m / (sqrt(v) + correction2 * eps), then the decay: both kernels' update.
__device__ __forceinline__ float updated_parameter(float p, float m, float v, const StepConstants& c) {
  const float denom = fma_ftz(c.correction2, c.eps, sqrt_approx(v));
  p = fma_ftz(c.step_size, divide_approx(m, denom), p);
  return c.weight_decay > 0.0f ? mul_ftz(c.decay, p) : p;
}

// kOptimizerStatic8bit2StateBlockwise<float, ADAM, 256, 1> for one chunk.
__device__ void blockwise_chunk(const AdamW8bitTensor& t, int64_t chunk, int lane, const float* map1,
                                const float* map2, const float* tree1, const float* tree2, const StepConstants& c) {
  const int64_t base = chunk * kAdamW8bitChunkSize;
  const int valid = static_cast<int>(min(static_cast<int64_t>(kAdamW8bitChunkSize), t.numel - base));
  unsigned char* codes1 = static_cast<unsigned char*>(t.state1) + base;
  unsigned char* codes2 = static_cast<unsigned char*>(t.state2) + base;
  const float absmax1 = t.absmax1[chunk];
  const float absmax2 = t.absmax2[chunk];

  float g_vals[kPerLane], s1_vals[kPerLane], s2_vals[kPerLane];
  float new_local_abs_max1 = -FLT_MAX;
  float new_local_abs_max2 = -FLT_MAX;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = j * kWarpSize + lane;
    const bool in = e < valid;
    // bnb's block loads pad a partial block: gradient 0, codes 128 and 0.
    g_vals[j] = in ? t.grad[base + e] : 0.0f;
    const unsigned char c1 = in ? codes1[e] : 128;
    const unsigned char c2 = in ? codes2[e] : 0;
    if (!isnan(g_vals[j]) && !isinf(g_vals[j])) {
      const float g_val = mul_ftz(g_vals[j], kGradientScale);
      s2_vals[j] = fma_ftz(g_val, mul_ftz(c.one_minus_beta2, g_val), mul_ftz(mul_ftz(map2[c2], absmax2), c.beta2));
      s1_vals[j] = fma_ftz(c.one_minus_beta1, g_val, mul_ftz(mul_ftz(map1[c1], absmax1), c.beta1));
    } else {
      s1_vals[j] = 0.0f;
      s2_vals[j] = 0.0f;
    }
    new_local_abs_max1 = fmaxf(new_local_abs_max1, fabsf(s1_vals[j]));
    new_local_abs_max2 = fmaxf(new_local_abs_max2, fabsf(s2_vals[j]));
  }
  // The block's absmax: a max, exact in any order. Every lane has read the old absmax (its
  // values feed the shuffles) before lane 0 overwrites it.
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    new_local_abs_max1 = fmaxf(new_local_abs_max1, __shfl_xor_sync(0xffffffffu, new_local_abs_max1, offset));
    new_local_abs_max2 = fmaxf(new_local_abs_max2, __shfl_xor_sync(0xffffffffu, new_local_abs_max2, offset));
  }
  if (lane == 0) {
    t.absmax1[chunk] = new_local_abs_max1;
    t.absmax2[chunk] = new_local_abs_max2;
  }

#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = j * kWarpSize + lane;
    if (e >= valid) continue;
    if (!isnan(g_vals[j]) && !isinf(g_vals[j])) {
      t.param[base + e] = updated_parameter(t.param[base + e], s1_vals[j], s2_vals[j], c);
    }
    unsigned char c1 = quantize_in_map<true>(map1, tree1, divide_approx(s1_vals[j], new_local_abs_max1));
    const unsigned char c2 = quantize_in_map<false>(map2, tree2, divide_approx(s2_vals[j], new_local_abs_max2));
    // bnb: the first moment keeps its sign through quantization (the second is never negative).
    if (signbit(map1[c1]) != signbit(s1_vals[j])) {
      if (s1_vals[j] > 0.0f)
        c1 += 1;
      else
        c1 -= 1;
    }
    codes1[e] = c1;
    codes2[e] = c2;
  }
}

// kOptimizer32bit2State<float, ADAM> for one chunk (skip_zeros off; max_unorm off, so its update
// scale is 1 and multiplies nothing away).
__device__ void fp32_chunk(const AdamW8bitTensor& t, int64_t chunk, int lane, const StepConstants& c) {
  const int64_t base = chunk * kAdamW8bitChunkSize;
  const int valid = static_cast<int>(min(static_cast<int64_t>(kAdamW8bitChunkSize), t.numel - base));
  float* state1 = static_cast<float*>(t.state1) + base;
  float* state2 = static_cast<float*>(t.state2) + base;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = j * kWarpSize + lane;
    if (e >= valid) continue;
    const float g_val = mul_ftz(t.grad[base + e], kGradientScale);
    const float s1 = fma_ftz(state1[e], c.beta1, mul_ftz(g_val, c.one_minus_beta1));
    const float s2 = fma_ftz(state2[e], c.beta2, mul_ftz(c.one_minus_beta2, mul_ftz(g_val, g_val)));
    state1[e] = s1;
    state2[e] = s2;
    t.param[base + e] = updated_parameter(t.param[base + e], s1, s2, c);
  }
}

__global__ void __launch_bounds__(kThreads) adamw_8bit_kernel(KernelArgs a) {
  __shared__ float map1[kMapSize];
  __shared__ float map2[kMapSize];
  __shared__ float tree1[kMapSize];  // Note [Search tree layout]; entry 255 unused
  __shared__ float tree2[kMapSize];
  map1[threadIdx.x] = a.signed_map[threadIdx.x];
  map2[threadIdx.x] = a.unsigned_map[threadIdx.x];
  if (threadIdx.x < kMapSize - 1) {
    tree1[threadIdx.x] = search_tree_entry(a.signed_map, threadIdx.x);
    tree2[threadIdx.x] = search_tree_entry(a.unsigned_map, threadIdx.x);
  }
  __syncthreads();
  const StepConstants c = step_constants(a.s);
  const int lane = threadIdx.x % kWarpSize;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t chunk = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
       chunk < a.chunk_count; chunk += stride) {
    const AdamW8bitTensor t = a.tensors[a.chunk_tensor[chunk]];  // a copy: the stores below cannot alias it
    const int64_t local = chunk - t.first_chunk;
    if (t.blockwise) {
      blockwise_chunk(t, local, lane, map1, map2, tree1, tree2, c);
    } else {
      fp32_chunk(t, local, lane, c);
    }
  }
}

}  // namespace

cudaError_t adamw_8bit_step(const AdamW8bitTensor* tensors, const int32_t* chunk_tensor, int64_t chunk_count,
                            const float* signed_map, const float* unsigned_map, AdamW8bitScalars scalars,
                            cudaStream_t stream) {
  static_assert(kThreads == kMapSize, "each thread copies one map entry");
  static_assert(kPerLane * kWarpSize == kAdamW8bitChunkSize, "a warp covers one chunk");
  if (chunk_count == 0) return cudaSuccess;
  int device = 0, processors = 0, blocks_per_processor = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device);
  if (status == cudaSuccess) {
    status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_processor, adamw_8bit_kernel, kThreads, 0);
  }
  if (status != cudaSuccess) return status;
  // Enough resident blocks to fill the GPU, each striding over chunks (the maps are loaded once
  // per block), or fewer when there are fewer chunks.
  const int64_t needed = (chunk_count + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t resident = static_cast<int64_t>(processors) * std::max(blocks_per_processor, 1);
  const auto blocks = static_cast<unsigned>(std::min(needed, resident));
  const KernelArgs args{tensors, chunk_tensor, chunk_count, signed_map, unsigned_map, scalars};
  adamw_8bit_kernel<<<blocks, kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace finetune::cuda_kernels
