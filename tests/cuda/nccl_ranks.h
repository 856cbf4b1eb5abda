// Multi-rank NCCL tests inside one test process, as nccl-tests' threads mode: one thread per rank,
// rank r on GPU r, each with its own TCP store connection and the communicator train builds
// (make_communicator, backend nccl), used as train uses it: a body that returns is followed by
// finish(), one that throws by abort(reason). The CPU twin is tests/ddp/ddp_test_helpers.h.
//
// Note [NCCL test world]
// NCCL refuses two ranks on one GPU ("duplicate GPU"), and a world of one is make_communicator's
// LocalCommunicator, not NCCL (an NcclCommunicator of one rank cannot be built: its PeerMonitor
// needs a peer). So the collective cases need two or more visible GPUs and skip, saying why, with
// fewer; the world is every visible GPU.
#pragma once

#include <gtest/gtest.h>

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../ddp/ddp_test_helpers.h"
#include "finetune/ddp/communicator.h"

namespace finetune::cuda_testing {

constexpr int kMinNcclWorld = 2;  // Note [NCCL test world]

inline int visible_gpus() { return static_cast<int>(c10::cuda::device_count()); }

inline std::string too_few_gpus(int visible) {
  return "needs " + std::to_string(kMinNcclWorld) + " or more GPUs, " + std::to_string(visible) +
         " visible (NCCL refuses two ranks on one GPU; Note [NCCL test world] in tests/cuda/nccl_ranks.h)";
}

// Runs body(rank, communicator) on world_size threads, rank r on cuda:r; returns each rank's
// exception (or null).
inline std::vector<std::exception_ptr> run_nccl_ranks_collecting(
    int world_size, double timeout_seconds, const std::function<void(int, Communicator&)>& body) {
  const int port = finetune::testing::free_local_port();
  std::vector<std::exception_ptr> errors(world_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(rank));
        c10::cuda::CUDAGuard device_guard(device);  // this thread's current device, as LOCAL_RANK's would be
        CommunicatorOptions options;
        options.backend = "nccl";
        options.timeout_seconds = timeout_seconds;
        // The ranks share this process: a peer monitor must never end it.
        options.peer_monitor.terminate = [rank](const std::string& message) {
          ADD_FAILURE() << "rank " << rank << "'s peer monitor would have ended the process: " << message;
        };
        auto communicator =
            make_communicator(finetune::testing::thread_launch_env(rank, world_size, port), device, options);
        try {
          body(rank, *communicator);
          communicator->finish();
        } catch (const std::exception& e) {
          communicator->abort(e.what());
          throw;
        }
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return errors;
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
