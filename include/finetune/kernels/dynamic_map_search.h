// The code of a value in a sorted 256-entry map (bnb's dynamic maps) as bitsandbytes' CUDA
// optimizer kernels find it (csrc/kernels.cu quantize_2D), read from the map stored as a search
// tree (Note [Search tree layout]). Host and device: the 8-bit AdamW kernel
// (train/cuda/adamw_8bit_kernel.cu) runs it, and tests/train/test_adamw_8bit.cpp checks it on the
// CPU against bnb's own loop for every map entry, every midpoint and their float neighbours.
//
// Note [Search tree layout]
// bnb's search reads map[127], then map[63] or map[191], then one of map[31, 95, 159, 223], ...:
// at depth k one of 2^k entries (map[(2j + 1) * 2^(7 - k) - 1], j < 2^k, j the turns so far as
// bits), all in the same few shared-memory banks in the map's own order (127, 63, 191, 31, ...
// are all 31 mod 32), so the lanes of a warp, at different nodes, serialise. Stored breadth-first
// (depth k at node 2^k - 1 + j, children 2 node + 1 and 2 node + 2) the candidates of a depth are
// consecutive words, in different banks up to depth 5; the leaf a search ends at, node 127 + j,
// stands for the even pivot 2 j.
#pragma once

#ifdef __CUDACC__
#define FINETUNE_HOST_DEVICE __host__ __device__
#else
#define FINETUNE_HOST_DEVICE
#endif

namespace finetune::cuda_kernels {

constexpr int kDynamicMapSize = 256;

// Entry `node` (0..254) of the search tree of `map`.
FINETUNE_HOST_DEVICE inline float search_tree_entry(const float* map, int node) {
  int depth = 0;
  while ((node + 1) >> (depth + 1)) ++depth;
  const int j = node + 1 - (1 << depth);
  return map[(2 * j + 1) * (1 << (7 - depth)) - 1];
}

// (a + b) * 0.5 as bnb's fast-math build rounds it (flushing subnormals; the maps' entries are
// normal numbers, so on the host the plain operations give the same bits).
FINETUNE_HOST_DEVICE inline float map_midpoint(float a, float b) {
#ifdef __CUDA_ARCH__
  float sum, half;
  asm("add.rn.ftz.f32 %0, %1, %2;" : "=f"(sum) : "f"(a), "f"(b));
  asm("mul.rn.ftz.f32 %0, %1, 0f3F000000;" : "=f"(half) : "f"(sum));
  return half;
#else
  return (a + b) * 0.5f;
#endif
}

// bnb's quantize_2D<kSigned>: binary search from the middle entry (seven halvings), then the
// nearer of the last pivot and its neighbour on x's side by their midpoint. Only the path is kept
// here: the search halves an interval of indices each time, so it ends at an even pivot p whose
// last lower and upper pivots are p - 1 and p + 1, or bnb's initial bounds where the search never
// turned that way (index 0 with -1 or 0, index 255 with 1). Without branches, so the lanes of a
// warp do not diverge. NaN takes bnb's path too (every comparison false: code 0).
template <bool kSigned>
FINETUNE_HOST_DEVICE inline unsigned char quantize_in_map(const float* map, const float* tree, float x) {
  int node = 0;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int depth = 0; depth < 7; ++depth) node = 2 * node + (x > tree[node] ? 2 : 1);
  const int pivot = 2 * node - 254;  // the leaf's even pivot
  const float val = map[pivot];
  const bool up = x > val;
  const int neighbour = up ? pivot + 1 : pivot - 1;  // 255 or -1: bnb's initial bound
  const int index = neighbour < 0 ? 0 : neighbour;
  const float loaded = map[index];
  const float bound = (neighbour == 255 || neighbour < 0) ? (up ? 1.0f : (kSigned ? -1.0f : 0.0f)) : loaded;
  const float midpoint = map_midpoint(bound, val);
  const bool take = up ? x > midpoint : x < midpoint;
  return static_cast<unsigned char>(take ? index : pivot);
}

}  // namespace finetune::cuda_kernels
