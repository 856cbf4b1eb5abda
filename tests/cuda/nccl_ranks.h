// NCCL tests inside one test process, as nccl-tests' threads mode: one thread per rank, rank r on
// GPU r, each with its own TCP store connection (connect_store, as make_communicator makes it) and
// the NCCL communicator built on it, used as train uses it: a body that returns is followed by
// finish(), one that throws by abort(reason). The CPU twin is tests/ddp/ddp_test_helpers.h.
//
// Note [NCCL test world]
// NCCL refuses two ranks on one GPU ("duplicate GPU"), so the world is every visible GPU, one rank
// each, and that may be one: the communicator is built with make_nccl_communicator, not
// make_communicator (which gives a world of one the non-NCCL LocalCommunicator). A world of one is
// still NCCL end to end (unique id through the store, init, the comm stream and its events, the
// watchdog, finalize), and the closed forms of the collective cases hold for it. Only a case that
// needs a second rank (a live peer that stalls) needs two GPUs, and skips, saying why, with one.
#pragma once

#include <gtest/gtest.h>

#include <c10/cuda/CUDAFunctions.h>

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "../ddp/ddp_test_helpers.h"
#include "finetune/ddp/backends.h"
#include "finetune/ddp/communicator.h"
#include "finetune/ddp/store_bootstrap.h"

namespace finetune::cuda_testing {

inline int visible_gpus() { return static_cast<int>(c10::cuda::device_count()); }

// For a case that needs `needed` ranks (Note [NCCL test world]).
inline std::string too_few_gpus(int needed, int visible) {
  return "needs " + std::to_string(needed) + " or more GPUs, " + std::to_string(visible) +
         " visible (NCCL refuses two ranks on one GPU; Note [NCCL test world] in tests/cuda/nccl_ranks.h)";
}

// Runs body(rank, communicator) on world_size threads (1 included), rank r on cuda:r; returns each
// rank's exception (or null).
inline std::vector<std::exception_ptr> run_nccl_ranks_collecting(
    int world_size, double timeout_seconds, const std::function<void(int, Communicator&)>& body) {
  return finetune::testing::run_ranks_collecting_with(
      world_size, timeout_seconds, "nccl",
      [world_size, timeout_seconds](int rank, int port, const CommunicatorOptions& options) {
        const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(rank));
        c10::cuda::set_device(device.index());  // this rank thread's current device, as LOCAL_RANK's would be
        const LaunchEnv launch = finetune::testing::thread_launch_env(rank, world_size, port);
        const auto store = connect_store(launch, timeout_from_seconds(timeout_seconds));
        return make_nccl_communicator(store, launch, device, options);
      },
      body);
}

// Like run_nccl_ranks_collecting, but every rank must succeed.
inline void run_nccl_ranks(int world_size, const std::function<void(int, Communicator&)>& body,
                           double timeout_seconds = 60) {
  const auto errors = run_nccl_ranks_collecting(world_size, timeout_seconds, body);
  for (int rank = 0; rank < world_size; ++rank) {
    if (errors[rank]) ADD_FAILURE() << "rank " << rank << " threw: " << finetune::testing::describe(errors[rank]);
  }
}

}  // namespace finetune::cuda_testing
