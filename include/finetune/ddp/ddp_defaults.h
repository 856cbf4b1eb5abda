// Default DDP settings, one place for the option table, the communicator, the watchdog, the
// reducer and the trainer (header-only and LibTorch-free, so the option parser can use it).
#pragma once

#include <cstdint>

namespace finetune {

// Seconds an operation may make no progress before the job is aborted (HF's ddp_timeout).
inline constexpr double kDefaultDdpTimeoutSeconds = 1800;
// Gradient bucket cap in MiB (DDP's bucket_cap_mb) and the smaller first bucket (c10d's 1 MiB).
inline constexpr int64_t kDefaultBucketCapMb = 25;
inline constexpr int64_t kFirstBucketBytes = int64_t{1} << 20;

}  // namespace finetune
