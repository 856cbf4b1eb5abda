#include "finetune/ddp/store_bootstrap.h"

#include <cmath>
#include <exception>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "finetune/ddp/ddp_error.h"

namespace finetune {

std::chrono::milliseconds timeout_from_seconds(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds)) {
    throw UsageError("distributed timeout must be a positive number of seconds, got " + std::to_string(seconds));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

std::optional<int> store_host_rank(const LaunchEnv& launch) {
  if (launch.use_agent_store) return std::nullopt;
  return 0;
}

c10::intrusive_ptr<c10d::Store> connect_store(const LaunchEnv& launch, std::chrono::milliseconds timeout) {
  if (launch.master_port < 0 || launch.master_port > 65535) {
    throw UsageError("MASTER_PORT must be in 0..65535, got " + std::to_string(launch.master_port));
  }
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(launch.master_port);
  // torchrun's agent already hosts the store (TORCHELASTIC_USE_AGENT_STORE): everyone is a client,
  // and we leave its worker count alone. Otherwise rank 0 hosts it, multi-tenant like env://.
  options.isServer = store_host_rank(launch) == launch.rank;
  if (!launch.use_agent_store) options.numWorkers = static_cast<size_t>(launch.world_size);
  options.waitWorkers = false;  // the backend rendezvous below waits for every rank anyway
  options.timeout = timeout;
  options.multiTenant = true;

  const std::string address = launch.master_addr + ":" + std::to_string(launch.master_port);
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, options);
  } catch (const std::exception& e) {
    const std::string role = options.isServer ? "hosting" : "connecting to";
    throw distributed_error(launch.rank, role + " the TCP store at " + address,
                            "failed (timeout " + seconds_text(timeout) + "): " + first_line(e.what()));
  }
  store->setTimeout(timeout);
  // Our keys under one prefix per attempt: the agent store also holds torchrun's own rendezvous
  // keys, and it outlives a worker group that --max-restarts replaces, so a restarted group must
  // not read the dead group's keys (Gloo would connect to its stale addresses). torch keys them
  // by TORCHELASTIC_RESTART_COUNT the same way ("/worker/attempt_N" in _create_c10d_store).
  auto prefixed =
      c10::make_intrusive<c10d::PrefixStore>("finetune/attempt_" + std::to_string(launch.restart_count), store);
  prefixed->setTimeout(timeout);
  return prefixed;
}

std::vector<uint8_t> store_get(c10d::Store& store, const std::string& key, std::chrono::milliseconds timeout,
                               int rank, const std::string& operation) {
  try {
    store.wait({key}, timeout);
    return store.get(key);
  } catch (const std::exception& e) {
    throw distributed_error(rank, operation,
                            "timed out after " + seconds_text(timeout) + " waiting for store key '" + key +
                                "' (did every rank start?): " + first_line(e.what()));
  }
}

}  // namespace finetune
