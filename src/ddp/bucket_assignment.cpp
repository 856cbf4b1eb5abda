#include <string>

#include "finetune/ddp/grad_reducer.h"
#include "finetune/util/errors.h"

namespace finetune {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<int64_t>& parameter_bytes,
                                                int64_t first_bucket_bytes, int64_t bucket_cap_bytes) {
  if (first_bucket_bytes <= 0 || bucket_cap_bytes <= 0) {
    throw UsageError("gradient bucket sizes must be positive, got first_bucket_bytes=" +
                     std::to_string(first_bucket_bytes) + " bucket_cap_bytes=" + std::to_string(bucket_cap_bytes));
  }
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> current;
  int64_t current_bytes = 0;
  // Backward produces the last parameters' gradients first, so they fill the first bucket; it is
  // small so that communication starts early.
  for (size_t k = parameter_bytes.size(); k-- > 0;) {
    const int64_t bytes = parameter_bytes[k];
    if (bytes < 0) throw Error("parameter " + std::to_string(k) + " has negative size " + std::to_string(bytes));
    const int64_t cap = buckets.empty() ? first_bucket_bytes : bucket_cap_bytes;
    // Close the bucket before it would exceed its cap; a parameter larger than the cap still
    // gets a bucket of its own.
    if (!current.empty() && current_bytes + bytes > cap) {
      buckets.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(k);
    current_bytes += bytes;
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

}  // namespace finetune
