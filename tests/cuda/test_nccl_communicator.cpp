// The NCCL communicator (ddp/cuda/nccl_communicator.cpp) in the manner of nccl-tests: every rank
// checks its result against a closed-form function of the ranks, so a collective is verified
// without a reference run. Ranks are threads, one per visible GPU, one GPU included (nccl_ranks.h,
// Note [NCCL test world]). And the two ways a peer can stall a job, which must end in a
// DistributedError within the DDP timeout instead of a hang: a peer that never arrives (runs on one
// GPU) and a live peer that stops joining collectives (two GPUs).
#include <gtest/gtest.h>

#include <ATen/cuda/CUDAGraph.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "finetune/util/errors.h"
#include "nccl_ranks.h"

namespace finetune {
namespace {

using cuda_testing::run_nccl_ranks;
using cuda_testing::run_nccl_ranks_collecting;
using cuda_testing::visible_gpus;
using Clock = std::chrono::steady_clock;

#define SKIP_WITH_FEWER_GPUS_THAN(needed, visible) \
  if ((visible) < (needed)) GTEST_SKIP() << cuda_testing::too_few_gpus(needed, visible)

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

at::TensorOptions on(const at::Device& device, at::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(device);
}

std::string label(const std::string& operation, at::ScalarType dtype, int64_t numel) {
  return operation + " " + c10::toString(dtype) + " x " + std::to_string(numel);
}

// Rank r contributes (r + 1) * (i % 5 + 1) at element i, so every rank reads n(n + 1)/2 * (i % 5 + 1).
// Exact in every dtype and any summation order: integers up to 180 for 8 ranks (bf16 holds every
// integer up to 256).
TEST(NcclCommunicator, AllReduceSumIsClosedFormOnEveryRankDtypeAndSize) {
  const int world = visible_gpus();
  const std::vector<at::ScalarType> dtypes = {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble, at::kInt, at::kLong};
  const std::vector<int64_t> sizes = {1, 7, 1000, 65537, int64_t{1} << 22};
  const int64_t triangle = int64_t{world} * (world + 1) / 2;
  run_nccl_ranks(world, [&](int rank, Communicator& communicator) {
    EXPECT_EQ(communicator.rank(), rank);
    EXPECT_EQ(communicator.world_size(), world);
    const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(rank));
    for (const auto dtype : dtypes) {
      for (const int64_t n : sizes) {
        const auto pattern = at::arange(n, on(device, at::kLong)).remainder(5).add(1);
        at::Tensor values = (pattern * (rank + 1)).to(dtype);
        communicator.all_reduce(values, label("all_reduce", dtype, n));
        const auto expected = (pattern * triangle).to(dtype);
        EXPECT_TRUE(at::equal(values.cpu(), expected.cpu())) << "rank " << rank << ": " << label("all_reduce", dtype, n);
      }
    }
    // Each rank counted exactly once: rank r contributes 2^r, and 2^n - 1 has one decomposition.
    at::Tensor bits = at::full({1000}, int64_t{1} << rank, on(device, at::kLong));
    communicator.all_reduce(bits, "all_reduce of powers of two");
    EXPECT_TRUE(at::equal(bits.cpu(), at::full({1000}, (int64_t{1} << world) - 1, at::TensorOptions().dtype(at::kLong))));
    // A dtype NCCL has no type for: refused on every rank, before anything is launched.
    at::Tensor flags = at::zeros({4}, on(device, at::kBool));
    EXPECT_THROW(communicator.all_reduce(flags, "all_reduce of bools"), DistributedError);
  });
}

// Buckets in flight at once, launched from a side stream that is the current one (as the reducer's
// hooks run): each collective must wait for the fill just written on that stream, and work on that
// stream after wait() must see the sum. 64 MiB buckets make a missing order visible.
TEST(NcclCommunicator, AsyncAllReducesOrderWithTheCurrentStreamBothWays) {
  const int world = visible_gpus();
  const int64_t triangle = int64_t{world} * (world + 1) / 2;
  const std::vector<int64_t> sizes = {int64_t{1} << 24, 1000, int64_t{1} << 20, 3};
  run_nccl_ranks(world, [&](int rank, Communicator& communicator) {
    const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(rank));
    c10::cuda::CUDAStreamGuard side_stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
    std::vector<at::Tensor> buckets;
    std::vector<std::unique_ptr<CollectiveWork>> works;
    for (size_t k = 0; k < sizes.size(); ++k) {
      at::Tensor bucket = at::empty({sizes[k]}, on(device, at::kFloat));
      bucket.fill_(static_cast<double>((rank + 1) * (k + 1)));
      works.push_back(communicator.all_reduce_async(bucket, "bucket " + std::to_string(k)));
      buckets.push_back(bucket);
    }
    for (size_t k = 0; k < sizes.size(); ++k) {
      works[k]->wait();
      buckets[k].mul_(2);
    }
    for (size_t k = 0; k < sizes.size(); ++k) {
      const double expected = 2.0 * static_cast<double>(k + 1) * static_cast<double>(triangle);
      EXPECT_TRUE(at::equal(buckets[k].cpu(), at::full({sizes[k]}, expected, at::TensorOptions().dtype(at::kFloat))))
          << "rank " << rank << ": bucket " << k;
    }
  });
}

// Note [Bucket all-reduces during a replay] (ddp/grad_reducer.h): a graph writes the bucket between
// two ~50 ms spins and records an external event after the write; all_reduce_after(event), issued
// right after the launch, must sum what the replay wrote, not the -1 the bucket held before it (a
// collective that waited for nothing, or for the event's record by an earlier replay, would start
// during the first spin and read -1). Three replays: each must be waited for, not the first one's.
TEST(NcclCommunicator, AllReduceAfterAGraphsEventSumsWhatTheReplayWroteBeforeIt) {
  const int world = visible_gpus();
  const int64_t triangle = int64_t{world} * (world + 1) / 2;
  constexpr int64_t kSpinCycles = 100'000'000;  // ~50 ms at an H100's ~2 GHz
  run_nccl_ranks(world, [&](int rank, Communicator& communicator) {
    const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(rank));
    const auto stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
    c10::cuda::CUDAStreamGuard on_stream(stream);
    const int64_t numel = int64_t{1} << 20;
    at::Tensor bucket = at::empty({numel}, on(device, at::kFloat));
    const at::Tensor source = at::full({numel}, static_cast<double>(rank + 1), on(device, at::kFloat));
    cudaEvent_t event{};
    ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
    at::cuda::CUDAGraph graph;
    stream.synchronize();
    graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    at::cuda::sleep(kSpinCycles);
    bucket.copy_(source);
    ASSERT_EQ(cudaEventRecordWithFlags(event, stream.stream(), cudaEventRecordExternal), cudaSuccess);
    at::cuda::sleep(kSpinCycles);
    graph.capture_end();
    for (int replay = 0; replay < 3; ++replay) {
      bucket.fill_(-1.0);
      graph.replay();
      communicator.all_reduce_after(bucket, "bucket after the graph's event", ReadyEvent{event})->wait();
      EXPECT_TRUE(at::equal(bucket.cpu(), at::full({numel}, static_cast<double>(triangle), at::TensorOptions().dtype(at::kFloat))))
          << "rank " << rank << ", replay " << replay << ": element 0 is " << bucket[0].item<float>();
    }
    stream.synchronize();
    cudaEventDestroy(event);
  });
}

// Rank r holds r * 1000 + i % 251; after a broadcast from `root` every rank holds root's values.
TEST(NcclCommunicator, BroadcastFromEveryRootLeavesTheRootsValues) {
  const int world = visible_gpus();
  run_nccl_ranks(world, [&](int rank, Communicator& communicator) {
    const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(rank));
    for (int root = 0; root < world; ++root) {
      for (const auto dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
        for (const int64_t n : {int64_t{1}, int64_t{4099}, int64_t{1} << 20}) {
          const auto values_of = [&](int r) {
            return (at::arange(n, on(device, at::kLong)).remainder(251) + 1000 * r).to(dtype);
          };
          at::Tensor values = values_of(rank);
          communicator.broadcast(values, root, label("broadcast from rank " + std::to_string(root), dtype, n));
          EXPECT_TRUE(at::equal(values.cpu(), values_of(root).cpu()))
              << "rank " << rank << ": " << label("broadcast from rank " + std::to_string(root), dtype, n);
        }
      }
    }
    // A non-contiguous tensor: broadcast through a contiguous copy, written back into the view.
    const auto grid = at::arange(15, on(device, at::kFloat)).view({5, 3});
    at::Tensor base = grid + 100.0 * rank;
    at::Tensor transposed = base.t();
    communicator.broadcast(transposed, world - 1, "broadcast into a transposed view");
    EXPECT_TRUE(at::equal(base.cpu(), (grid + 100.0 * (world - 1)).cpu())) << "rank " << rank;
    EXPECT_THROW(communicator.broadcast(base, world, "broadcast from no rank"), DistributedError);
  });
}

// Ranks arrive at different times (rank-dependent sleeps); each counts itself in before the barrier,
// so a barrier that returns early on any rank sees a count below the world size.
TEST(NcclCommunicator, BarrierReturnsOnlyAfterEveryRankArrived) {
  const int world = visible_gpus();
  constexpr int kRounds = 3;
  std::array<std::atomic<int>, kRounds> arrived;
  for (auto& count : arrived) count.store(0);
  run_nccl_ranks(world, [&](int rank, Communicator& communicator) {
    for (int round = 0; round < kRounds; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(150 * ((rank + round) % world)));
      arrived[round].fetch_add(1);
      communicator.barrier("barrier round " + std::to_string(round));
      EXPECT_EQ(arrived[round].load(), world) << "rank " << rank << " left barrier round " << round << " early";
    }
  });
}

// A signal published by rank 0 (as a node's first rank announces a download) reaches every rank,
// rank 0 itself included. In a world of one no peer can publish, so a wait for a key nobody
// published is refused at once instead of running out the timeout (there is no peer monitor).
TEST(NcclCommunicator, SignalFromRankZeroReachesEveryRank) {
  const int world = visible_gpus();
  run_nccl_ranks(world, [&](int rank, Communicator& communicator) {
    if (rank == 0) communicator.publish("weights ready", "/tmp/weights-of-rank-0");
    EXPECT_EQ(communicator.wait_for("weights ready", "rank 0's weights"), "/tmp/weights-of-rank-0") << "rank " << rank;
    if (world > 1) return;
    const auto started = Clock::now();
    try {
      communicator.wait_for("never published", "a peer's signal");
      ADD_FAILURE() << "a wait for a signal nobody published returned in a world of one";
    } catch (const DistributedError& e) {
      EXPECT_EQ(std::string(e.what()), "rank 0: waiting for a peer's signal is a wait for no peer (world size 1)");
    }
    EXPECT_LT(seconds_since(started), 1.0) << "refused at once, not after the timeout";
  });
}

// Rank 1 of 2 never starts: rank 0 hosts the store and publishes NCCL's unique id, and its
// communicator init waits for a peer that never comes; it must give up after the timeout with an
// error naming the rank and the init, and not leave anything running that hangs (one GPU is enough).
TEST(NcclCommunicator, InitWithAPeerThatNeverStartsTimesOut) {
  constexpr double kTimeout = 2.0;
  CommunicatorOptions options;
  options.backend = "nccl";
  options.timeout_seconds = kTimeout;
  const auto launch = testing::thread_launch_env(/*rank=*/0, /*world_size=*/2, testing::free_local_port());
  const auto started = Clock::now();
  try {
    auto communicator = make_communicator(launch, at::Device(at::kCUDA, 0), options);
    FAIL() << "expected a DistributedError: the communicator of a 2-rank world came up with one rank";
  } catch (const DistributedError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("rank 0: NCCL communicator init (2 ranks) timed out after 2 s", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line, no backtrace: " << message;
  }
  const double elapsed = seconds_since(started);
  RecordProperty("seconds_to_error", std::to_string(elapsed));
  EXPECT_GE(elapsed, kTimeout - 0.05);
  EXPECT_LT(elapsed, kTimeout + 3.0) << "ncclCommAbort of the pending init took too long";
}

// Both ranks up, then rank 1 (alive: its heartbeats go on) does not join rank 0's barrier. Rank 0's
// watchdog must abort after the timeout with "timed out" naming the rank and operation. Rank 1
// then waits for a signal from rank 0 (as a rank waits for a download by its node's first rank)
// and must learn of rank 0's failure from the peer monitor (failed/0 in the store) instead of
// waiting on. It starts no collective after the startup barrier: one launched while rank 0's abort
// is still under way could complete rank 0's stalled barrier.
TEST(NcclCommunicator, PeerThatStopsJoiningCollectivesIsAbortedAfterTheTimeout) {
  const int visible = visible_gpus();
  SKIP_WITH_FEWER_GPUS_THAN(2, visible);  // the stalled peer is a second rank
  constexpr double kTimeout = 2.0;
  std::promise<void> rank0_done;
  const std::shared_future<void> rank0_done_future = rank0_done.get_future().share();
  double elapsed = -1;
  const auto errors = run_nccl_ranks_collecting(2, kTimeout, [&](int rank, Communicator& communicator) {
    communicator.barrier("startup barrier");
    if (rank == 1) {
      rank0_done_future.wait_for(std::chrono::seconds(30));  // bounded, should rank 0 hang after all
      communicator.wait_for("never published", "rank 0's signal");
      return;
    }
    const auto started = Clock::now();
    try {
      communicator.barrier("stalled barrier");
    } catch (...) {
      elapsed = seconds_since(started);
      rank0_done.set_value();
      throw;
    }
    rank0_done.set_value();
  });
  ASSERT_TRUE(errors[0]) << "rank 0's barrier finished without its peer";
  try {
    std::rethrow_exception(errors[0]);
  } catch (const DistributedError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("rank 0: stalled barrier timed out after 2 s", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line, no backtrace: " << message;
  } catch (const std::exception& e) {
    FAIL() << "not a DistributedError: " << e.what();
  }
  RecordProperty("seconds_to_error", std::to_string(elapsed));
  EXPECT_GE(elapsed, kTimeout - 0.05);
  EXPECT_LT(elapsed, kTimeout + 1.5);  // the watchdog polls every 0.1 s

  ASSERT_TRUE(errors[1]) << "rank 1's wait for rank 0 ended without an error";
  try {
    std::rethrow_exception(errors[1]);
  } catch (const DistributedError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("rank 1: waiting for rank 0's signal failed: rank 0 exited with an error: rank 0: "
                            "stalled barrier timed out after 2 s",
                            0),
              0u)
        << message;
  } catch (const std::exception& e) {
    FAIL() << "not a DistributedError: " << e.what();
  }
}

}  // namespace
}  // namespace finetune
