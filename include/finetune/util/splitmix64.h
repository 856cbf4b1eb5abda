#pragma once
// SplitMix64's finaliser (Steele, Lea, Flood 2014): spreads a 64-bit value over the whole seed
// space, so that neighbouring inputs (seeds, epochs, steps) give unrelated generator states.

#include <cstdint>

namespace finetune {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace finetune
