// Multi-rank tests inside one test process: each rank is a thread with its own TCP store
// client/server on a free localhost port and its own Gloo communicator, used as train does: a body
// that returns is followed by finish(), one that throws by abort(reason).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "finetune/ddp/communicator.h"

namespace finetune::testing {

// A port the kernel just handed out (and we released): free unless someone races us for it.
inline int free_local_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    throw std::runtime_error("could not find a free port");
  }
  close(fd);
  return ntohs(address.sin_port);
}

inline LaunchEnv thread_launch_env(int rank, int world_size, int port) {
  LaunchEnv launch;
  launch.launcher = Launcher::Torchrun;
  launch.rank = rank;
  launch.world_size = world_size;
  launch.local_rank = rank;
  launch.local_world_size = world_size;
  launch.master_addr = "127.0.0.1";
  launch.master_port = port;
  launch.master_addr_given = true;
  return launch;
}

// c10d's process-wide flight recorder inserts each process group's status into a map before it
// takes its lock (FlightRecorder::recordWithResetEnabled, torch 2.11): ranks that are threads of
// one process race there on their first collectives, and a test crashed in that map under load.
// The recorder is read once, when the first process group is made: it is switched off before.
inline void disable_flight_recorder() {
  static const bool done = [] { return ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/1) == 0; }();
  (void)done;
}

// Builds rank `rank`'s communicator of a world whose store is on `port`, with `options`.
using CommunicatorFactory =
    std::function<std::unique_ptr<Communicator>(int rank, int port, const CommunicatorOptions& options)>;

// Runs body(rank, communicator) on world_size threads, each rank's communicator made by `make`
// and used as train uses it: a body that returns is followed by finish(), one that throws by
// abort(reason). Returns each rank's exception (or null).
inline std::vector<std::exception_ptr> run_ranks_collecting_with(int world_size, double timeout_seconds,
                                                                 const std::string& backend,
                                                                 const CommunicatorFactory& make,
                                                                 const std::function<void(int, Communicator&)>& body) {
  disable_flight_recorder();
  const int port = free_local_port();
  std::vector<std::exception_ptr> errors(world_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        CommunicatorOptions options;
        options.backend = backend;
        options.timeout_seconds = timeout_seconds;
        // The ranks share this process: a peer monitor must never end it.
        options.peer_monitor.terminate = [rank](const std::string& message) {
          ADD_FAILURE() << "rank " << rank << "'s peer monitor would have ended the process: " << message;
        };
        auto communicator = make(rank, port, options);
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

// Gloo ranks on the CPU (make_communicator).
inline std::vector<std::exception_ptr> run_ranks_collecting(
    int world_size, double timeout_seconds, const std::function<void(int, Communicator&)>& body) {
  return run_ranks_collecting_with(
      world_size, timeout_seconds, "gloo",
      [world_size](int rank, int port, const CommunicatorOptions& options) {
        return make_communicator(thread_launch_env(rank, world_size, port), at::Device(at::kCPU), options);
      },
      body);
}

inline std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Like run_ranks_collecting, but every rank must succeed.
inline void run_ranks(int world_size, const std::function<void(int, Communicator&)>& body,
                      double timeout_seconds = 20) {
  const auto errors = run_ranks_collecting(world_size, timeout_seconds, body);
  for (int rank = 0; rank < world_size; ++rank) {
    if (errors[rank]) ADD_FAILURE() << "rank " << rank << " threw: " << describe(errors[rank]);
  }
}

}  // namespace finetune::testing
