// Rendezvous through a c10d TCPStore at MASTER_ADDR:MASTER_PORT.
//   - our own launch: rank 0 hosts the store (multi-tenant, like torch.distributed's env://),
//     the other ranks connect as clients;
//   - torchrun with TORCHELASTIC_USE_AGENT_STORE=True: the elastic agent already hosts it, so
//     every rank is a client (what torch's _create_c10d_store does).
// Either way our keys live under the prefix "finetune/attempt_<TORCHELASTIC_RESTART_COUNT>/" so
// they never collide with the agent's rendezvous keys nor with an earlier, restarted attempt's.
// Connecting and every blocking get are bounded by the timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "finetune/launch/launch_env.h"

namespace finetune {

// The rank whose process hosts the store: rank 0, or none when torchrun's agent hosts it.
std::optional<int> store_host_rank(const LaunchEnv& launch);

// Throws DistributedError naming the rank and address when the store cannot be reached in time.
c10::intrusive_ptr<c10d::Store> connect_store(const LaunchEnv& launch, std::chrono::milliseconds timeout);

// Blocking get bounded by `timeout`; a missing key is a DistributedError naming rank and operation.
std::vector<uint8_t> store_get(c10d::Store& store, const std::string& key, std::chrono::milliseconds timeout,
                               int rank, const std::string& operation);

std::chrono::milliseconds timeout_from_seconds(double seconds);

}  // namespace finetune
