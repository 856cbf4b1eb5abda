// The softmax statistics of one vocabulary tile of the LM head loss in one kernel, with every
// per-element formula of the ATen composition it replaces (sweep_vocab_tile in train/loss.cpp):
// z is the model-dtype logit upcast to fp32, the maxima are exact (a NaN wins, as in amax and
// maximum), each probability is expf of the fp32 difference z - m_new rounded to the model dtype
// as .to() rounds it (to nearest even), and the rescale is expf(m_old - m_new). Only the order in
// which the row sum adds its fp32 terms differs from at::sum's.
//
// Layout: one block of kThreads threads per row, which it reads twice (the maximum, then the
// probabilities and their sum; the second read mostly from L2), thread t taking elements (or
// 16-byte packs of eight) t, t + kThreads, ...; the two reductions are warp shuffles and then one
// shared-memory step, in a fixed order, so a launch's results do not vary from run to run.
// Thread 0 then updates the row's state (vocab_tile_softmax_kernel.h).
#include "vocab_tile_softmax_kernel.h"

#include <cmath>

#include "finetune/kernels/half_precision.cuh"

namespace finetune::cuda_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;

struct KernelArgs {
  const void* logits;  // (rows, columns)
  void* probs;         // (rows, columns)
  int64_t columns;
  const int64_t* targets;  // (rows)
  int64_t vocab_start;
  VocabTileRowState state;
  float* rescale;  // (rows); null on the first tile
  bool first;
};

// The larger of a and b, a NaN if either is one (as ATen's amax and maximum take it).
__device__ __forceinline__ float max_or_nan(float a, float b) { return (a != a || a > b) ? a : b; }

struct MaxOp {
  __device__ float operator()(float a, float b) const { return max_or_nan(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// `value` reduced over the block, returned to every thread. The butterfly exchanges give each lane
// the same result (a + b == b + a); `shared` is free again when this returns.
template <typename Op>
__device__ float block_reduce(float value, float* shared, Op op) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  const int lane = threadIdx.x % kWarpSize;
  if (lane == 0) shared[threadIdx.x / kWarpSize] = value;
  __syncthreads();
  value = shared[lane % kWarps];  // each group of kWarps lanes holds every warp's partial
#pragma unroll
  for (int offset = kWarps / 2; offset > 0; offset /= 2) value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  __syncthreads();
  return value;
}

// The row's state after its tile (thread 0): see vocab_tile_softmax in the header.
template <typename T>
__device__ void update_row_state(const KernelArgs& a, int64_t row, const T* z, float old_max, float new_max,
                                 float tile_sum) {
  const int64_t column = a.targets[row] - a.vocab_start;
  if (column >= 0 && column < a.columns) {
    a.state.target_logit[row] = to_float(z[column]);
  } else if (a.first) {
    a.state.target_logit[row] = 0.0f;
  }
  if (a.first) {
    a.state.exp_sum[row] = tile_sum;
  } else {
    const float rescale = expf(old_max - new_max);
    a.rescale[row] = rescale;
    a.state.exp_sum[row] = fmaf(a.state.exp_sum[row], rescale, tile_sum);  // addcmul's a + b * c
  }
  a.state.running_max[row] = new_max;
}

template <typename T, int Width>
__global__ void __launch_bounds__(kThreads) vocab_tile_softmax_kernel(KernelArgs a) {
  __shared__ float partials[kWarps];
  const int64_t row = blockIdx.x;
  const T* z = static_cast<const T*>(a.logits) + row * a.columns;
  T* p = static_cast<T*>(a.probs) + row * a.columns;
  const float old_max = a.first ? 0.0f : a.state.running_max[row];  // read before thread 0 writes it
  float local_max = -INFINITY;
  for (int64_t i = int64_t{threadIdx.x} * Width; i < a.columns; i += int64_t{kThreads} * Width) {
    const auto values = load<T, Width>(z + i);
#pragma unroll
    for (int k = 0; k < Width; ++k) local_max = max_or_nan(local_max, to_float(values.v[k]));
  }
  const float tile_max = block_reduce(local_max, partials, MaxOp{});
  const float new_max = a.first ? tile_max : max_or_nan(old_max, tile_max);
  float local_sum = 0.0f;
  for (int64_t i = int64_t{threadIdx.x} * Width; i < a.columns; i += int64_t{kThreads} * Width) {
    const auto values = load<T, Width>(z + i);
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < Width; ++k) {
      const float e = expf(to_float(values.v[k]) - new_max);
      local_sum += e;
      out.v[k] = from_float<T>(e);
    }
    store<T, Width>(p + i, out);
  }
  const float tile_sum = block_reduce(local_sum, partials, SumOp{});
  if (threadIdx.x == 0) update_row_state<T>(a, row, z, old_max, new_max, tile_sum);
}

template <typename T>
cudaError_t launch(const KernelArgs& args, int64_t rows, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(rows));
  if (args.columns % kPack == 0 && aligned16(args.logits) && aligned16(args.probs)) {
    vocab_tile_softmax_kernel<T, kPack><<<grid, kThreads, 0, stream>>>(args);
  } else {
    vocab_tile_softmax_kernel<T, 1><<<grid, kThreads, 0, stream>>>(args);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t vocab_tile_softmax(HalfKind kind, const void* logits, void* probs, int64_t rows, int64_t columns,
                               const int64_t* targets, int64_t vocab_start, VocabTileRowState state, float* rescale,
                               bool first, cudaStream_t stream) {
  if (rows == 0 || columns == 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;  // one block per row
  const KernelArgs args{logits, probs, columns, targets, vocab_start, state, rescale, first};
  return kind == HalfKind::BFloat16 ? launch<__nv_bfloat16>(args, rows, stream) : launch<__half>(args, rows, stream);
}

}  // namespace finetune::cuda_kernels
