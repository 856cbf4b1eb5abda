#include "finetune/train/training_state.h"

#include <cstdio>

namespace finetune {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

// FNV-1a's step over a whole 64-bit word (one multiply per value, not per byte), with the high
// half folded back in so that every input bit reaches the low bits too.
void hash_value(uint64_t& hash, int64_t value) {
  hash = (hash ^ static_cast<uint64_t>(value)) * kFnvPrime;
  hash ^= hash >> 32;
}

}  // namespace

std::string samples_fingerprint(const std::vector<Sample>& samples) {
  uint64_t hash = kFnvOffset;
  hash_value(hash, static_cast<int64_t>(samples.size()));
  for (const auto& sample : samples) {
    hash_value(hash, static_cast<int64_t>(sample.input_ids.size()));
    for (const int32_t id : sample.input_ids) hash_value(hash, id);
    for (const int32_t label : sample.labels) hash_value(hash, label);
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

DataIdentity data_identity(const std::string& dataset, const std::vector<Sample>& samples,
                           const MicroBatchStreamConfig& stream) {
  DataIdentity identity;
  identity.dataset = dataset;
  identity.samples = static_cast<int64_t>(samples.size());
  identity.samples_fingerprint = samples_fingerprint(samples);
  identity.max_seq_length = stream.max_seq_length;
  identity.packing = stream.packing;
  identity.group_by_length = stream.group_by_length;
  identity.shuffle = stream.sampler.shuffle;
  return identity;
}

}  // namespace finetune
