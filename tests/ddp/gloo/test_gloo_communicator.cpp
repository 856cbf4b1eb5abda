#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "../ddp_test_helpers.h"
#include "finetune/ddp/communicator.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using testing::describe;
using testing::run_ranks;
using testing::run_ranks_collecting;

TEST(MakeCommunicator, WorldSizeOneIsLocal) {
  LaunchEnv launch;
  auto communicator = make_communicator(launch, at::Device(at::kCPU), CommunicatorOptions{});
  EXPECT_EQ(communicator->world_size(), 1);
  at::Tensor t = at::full({3}, 2.5);
  communicator->all_reduce(t, "identity");
  EXPECT_TRUE(t.equal(at::full({3}, 2.5)));
  EXPECT_THROW(communicator->broadcast(t, 1, "broadcast"), DistributedError);
  communicator->finish();  // no peers, no monitor: nothing to tell anyone
  communicator->abort("an error");
}

TEST(MakeCommunicator, RejectsBadOptions) {
  LaunchEnv launch;
  CommunicatorOptions options;
  options.backend = "mpi";
  EXPECT_THROW(make_communicator(launch, at::Device(at::kCPU), options), UsageError);
  options.backend = "nccl";
  EXPECT_THROW(make_communicator(launch, at::Device(at::kCPU), options), UsageError);
  options.backend = "gloo";
  EXPECT_THROW(make_communicator(launch, at::Device(at::kCUDA, 0), options), UsageError);
  options.backend = "auto";
  options.timeout_seconds = 0;
  EXPECT_THROW(make_communicator(launch, at::Device(at::kCPU), options), UsageError);
  launch.world_size = 2;
  launch.rank = 2;
  EXPECT_THROW(make_communicator(launch, at::Device(at::kCPU), CommunicatorOptions{}), UsageError);
}

TEST(GlooCommunicator, AllReduceSums) {
  const int world = 3;
  run_ranks(world, [&](int rank, Communicator& communicator) {
    EXPECT_EQ(communicator.rank(), rank);
    EXPECT_EQ(communicator.world_size(), world);
    at::Tensor sum = at::full({4, 5}, static_cast<double>(rank + 1), at::TensorOptions().dtype(at::kFloat));
    communicator.all_reduce(sum, "sum");
    EXPECT_TRUE(sum.equal(at::full({4, 5}, 6.0, at::TensorOptions().dtype(at::kFloat))));  // 1+2+3

    at::Tensor doubles = at::full({7}, static_cast<double>(rank + 1), at::TensorOptions().dtype(at::kDouble));
    communicator.all_reduce(doubles, "double sum");
    EXPECT_TRUE(doubles.equal(at::full({7}, 6.0, at::TensorOptions().dtype(at::kDouble))));

    at::Tensor ints = at::arange(6, at::TensorOptions().dtype(at::kLong)) * (rank + 1);
    communicator.all_reduce(ints, "int sum");
    EXPECT_TRUE(ints.equal(at::arange(6, at::TensorOptions().dtype(at::kLong)) * 6));

    // Non-contiguous input: reduced through a contiguous copy, written back.
    at::Tensor base = at::full({3, 2}, static_cast<double>(rank), at::TensorOptions().dtype(at::kFloat));
    at::Tensor transposed = base.t();
    communicator.all_reduce(transposed, "transposed");
    EXPECT_TRUE(base.equal(at::full({3, 2}, 3.0, at::TensorOptions().dtype(at::kFloat))));  // 0+1+2
  });
}

TEST(GlooCommunicator, SeveralAsyncAllReducesInFlight) {
  const int world = 2;
  run_ranks(world, [&](int rank, Communicator& communicator) {
    std::vector<at::Tensor> tensors;
    std::vector<std::unique_ptr<CollectiveWork>> works;
    for (int k = 0; k < 4; ++k) {
      tensors.push_back(at::full({100}, static_cast<double>((rank + 1) * (k + 1)), at::TensorOptions().dtype(at::kFloat)));
      works.push_back(communicator.all_reduce_async(tensors.back(), "bucket " + std::to_string(k)));
    }
    for (int k = 0; k < 4; ++k) {
      works[k]->wait();
      EXPECT_TRUE(tensors[k].equal(at::full({100}, 3.0 * (k + 1), at::TensorOptions().dtype(at::kFloat)))) << k;
    }
  });
}

TEST(GlooCommunicator, BroadcastAndBarrier) {
  const int world = 3;
  run_ranks(world, [&](int rank, Communicator& communicator) {
    at::Tensor values = at::arange(5, at::TensorOptions().dtype(at::kFloat)) + 10.0 * rank;
    communicator.broadcast(values, 1, "broadcast from rank 1");
    EXPECT_TRUE(values.equal(at::arange(5, at::TensorOptions().dtype(at::kFloat)) + 10.0));

    communicator.barrier("barrier");
    EXPECT_THROW(communicator.broadcast(values, 3, "broadcast from nowhere"), DistributedError);
  });
}

TEST(GlooCommunicator, RankThatNeverJoinsTimesOut) {
  std::promise<void> rank0_done;
  std::shared_future<void> rank0_done_future = rank0_done.get_future().share();
  double elapsed_seconds = -1;
  const auto errors = run_ranks_collecting(2, 1.0, [&](int rank, Communicator& communicator) {
    if (rank == 1) {  // alive but never joins the collective
      rank0_done_future.wait_for(std::chrono::seconds(10));
      return;
    }
    const auto started = std::chrono::steady_clock::now();
    at::Tensor t = at::ones({8});
    try {
      communicator.all_reduce(t, "gradient bucket 0");
    } catch (...) {
      elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      rank0_done.set_value();
      throw;
    }
    rank0_done.set_value();
  });
  EXPECT_FALSE(errors[1]) << describe(errors[1]);
  ASSERT_TRUE(errors[0]);
  try {
    std::rethrow_exception(errors[0]);
  } catch (const DistributedError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("rank 0: gradient bucket 0 timed out after 1 s", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line, no backtrace: " << message;
  } catch (const std::exception& e) {
    FAIL() << "not a DistributedError: " << e.what();
  }
  EXPECT_GE(elapsed_seconds, 0.9);
  EXPECT_LT(elapsed_seconds, 3.0);
}

TEST(GlooCommunicator, PeerThatLeftIsADistributedError) {
  const auto errors = run_ranks_collecting(2, 2.0, [&](int rank, Communicator& communicator) {
    communicator.barrier("startup barrier");
    if (rank == 1) return;  // its communicator is destroyed: connections close
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    at::Tensor t = at::ones({8});
    communicator.all_reduce(t, "gradient bucket 2");
  });
  EXPECT_FALSE(errors[1]) << describe(errors[1]);
  ASSERT_TRUE(errors[0]);
  try {
    std::rethrow_exception(errors[0]);
  } catch (const DistributedError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("rank 0: gradient bucket 2 ", 0), 0u) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    FAIL() << "not a DistributedError: " << e.what();
  }
}

TEST(GlooCommunicator, RankThatFailedIsNamedByItsPeerAtOnce) {
  // A long timeout: only the failed/<rank> key can end rank 0's wait this fast.
  double elapsed_seconds = -1;
  const auto errors = run_ranks_collecting(2, 60.0, [&](int rank, Communicator& communicator) {
    communicator.barrier("startup barrier");
    if (rank == 1) throw std::runtime_error("rank 1: CUDA out of memory in step 3");
    const auto started = std::chrono::steady_clock::now();
    at::Tensor t = at::ones({8});
    try {
      communicator.all_reduce(t, "gradient bucket 0");
    } catch (...) {
      elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      throw;
    }
  });
  ASSERT_TRUE(errors[0]);
  const std::string message = describe(errors[0]);
  EXPECT_EQ(message.rfind("rank 0: ", 0), 0u) << message;
  EXPECT_NE(message.find("rank 1 exited with an error: rank 1: CUDA out of memory in step 3"), std::string::npos)
      << message;
  EXPECT_LT(elapsed_seconds, 2.0);  // below the heartbeat limit: the error key, not silence
}

TEST(MakeCommunicator, MissingStoreServerTimesOut) {
  CommunicatorOptions options;
  options.backend = "gloo";
  options.timeout_seconds = 1.0;
  const int port = testing::free_local_port();
  const auto started = std::chrono::steady_clock::now();
  try {
    make_communicator(testing::thread_launch_env(1, 2, port), at::Device(at::kCPU), options);
    FAIL() << "expected DistributedError";
  } catch (const DistributedError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1: connecting to the TCP store at 127.0.0.1:" + std::to_string(port)),
              std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 4.0);
}

// GLOO_SOCKET_IFNAME names the interface Gloo binds to: loopback by name carries the collectives.
TEST(GlooCommunicator, BindsToTheInterfaceGlooSocketIfnameNames) {
  const int world = 2;
  const auto errors = testing::run_ranks_collecting_with(
      world, 20.0, "gloo",
      [world](int rank, int port, const CommunicatorOptions& options) {
        LaunchEnv launch = testing::thread_launch_env(rank, world, port);
        launch.gloo_socket_ifname = "lo";
        return make_communicator(launch, at::Device(at::kCPU), options);
      },
      [](int rank, Communicator& communicator) {
        at::Tensor t = at::full({3}, static_cast<double>(rank + 1));
        communicator.all_reduce(t, "sum over lo");
        EXPECT_TRUE(t.equal(at::full({3}, 3.0)));
      });
  for (const auto& error : errors) EXPECT_FALSE(error) << describe(error);
}

// A name this host lacks is a usage error naming the variable and the interfaces it has, before
// Gloo's rendezvous (which would otherwise wait for the timeout).
TEST(GlooCommunicator, AnUnknownGlooSocketIfnameIsAUsageError) {
  CommunicatorOptions options;
  options.backend = "gloo";
  options.timeout_seconds = 30.0;
  const int port = testing::free_local_port();
  LaunchEnv launch = testing::thread_launch_env(0, 2, port);
  launch.gloo_socket_ifname = "lo,nosuch9";
  const auto started = std::chrono::steady_clock::now();
  try {
    make_communicator(launch, at::Device(at::kCPU), options);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("GLOO_SOCKET_IFNAME: this host has no network interface 'nosuch9' (it has: "),
              std::string::npos) << message;
    EXPECT_NE(message.find("lo"), std::string::npos) << message;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 10.0);
}

}  // namespace
}  // namespace finetune
