// make_communicator (backend choice + store bootstrap) and the world-size-1 LocalCommunicator.
#include "finetune/ddp/communicator.h"

#include <map>

#include "finetune/ddp/backends.h"
#include "finetune/ddp/ddp_error.h"
#include "finetune/ddp/network_interfaces.h"
#include "finetune/ddp/store_bootstrap.h"
#include "finetune/launch/environment.h"
#include "finetune/util/log.h"

namespace finetune {

namespace {

class FinishedWork : public CollectiveWork {
 public:
  void wait() override {}
};

// One process: every collective is the identity.
class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::unique_ptr<CollectiveWork> all_reduce_async(at::Tensor&, const std::string&) override {
    return std::make_unique<FinishedWork>();
  }
  std::unique_ptr<CollectiveWork> all_reduce_after(at::Tensor&, const std::string&, const ReadyEvent&) override {
    return std::make_unique<FinishedWork>();
  }
  void broadcast(at::Tensor&, int root, const std::string& what) override {
    if (root != 0) throw distributed_error(0, what, "has no rank " + std::to_string(root) + " (world size 1)");
  }
  void barrier(const std::string&) override {}
  void publish(const std::string& key, const std::string& value) override { published_[key] = value; }
  std::string wait_for(const std::string& key, const std::string& what) override {
    const auto it = published_.find(key);
    if (it == published_.end()) throw distributed_error(0, "waiting for " + what, "is a wait for no peer (world size 1)");
    return it->second;
  }
  void finish() override {}
  void abort(const std::string&) override {}

 private:
  std::map<std::string, std::string> published_;
};

}  // namespace

std::unique_ptr<CollectiveWork> Communicator::all_reduce_after(at::Tensor&, const std::string& what, const ReadyEvent&) {
  throw distributed_error(rank(), what, "cannot wait for a device event on this backend (CUDA graphs run on NCCL only)");
}

namespace {

std::string resolve_backend(const std::string& requested, const at::Device& device) {
  if (requested == "auto") return device.is_cuda() ? "nccl" : "gloo";
  if (requested == "nccl") {
    if (!device.is_cuda()) throw UsageError("distributed backend 'nccl' needs a CUDA device, got " + device.str());
    return requested;
  }
  if (requested == "gloo") {
    if (!device.is_cpu()) {
      throw UsageError("distributed backend 'gloo' reduces CPU tensors; device " + device.str() +
                       " needs backend 'nccl' (or 'auto')");
    }
    return requested;
  }
  throw UsageError("unknown distributed backend '" + requested + "' (expected auto, nccl or gloo)");
}

}  // namespace

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

std::unique_ptr<Communicator> make_communicator(const LaunchEnv& launch, const at::Device& device,
                                                const CommunicatorOptions& options) {
  if (launch.world_size < 1 || launch.rank < 0 || launch.rank >= launch.world_size) {
    throw UsageError("invalid rank " + std::to_string(launch.rank) + " for world size " +
                     std::to_string(launch.world_size));
  }
  const std::string backend = resolve_backend(options.backend, device);
  const auto timeout = timeout_from_seconds(options.timeout_seconds);
  if (launch.world_size == 1) return make_local_communicator();
  if (backend == "nccl" && !nccl_compiled_in()) {
    throw UsageError("distributed backend 'nccl' requested but this build has no CUDA/NCCL support");
  }

  log::info("rank " + std::to_string(launch.rank) + "/" + std::to_string(launch.world_size) + " (local " +
            std::to_string(launch.local_rank) + "/" + std::to_string(launch.local_world_size) + " on " + host_name() +
            "): " + backend + " rendezvous at " + launch.master_addr + ":" + std::to_string(launch.master_port) +
            (launch.use_agent_store ? " (torchrun agent store)" : ""));
  auto store = connect_store(launch, timeout);
  if (backend == "nccl") return make_nccl_communicator(store, launch, device, options);
  // GLOO_SOCKET_IFNAME, when set, names the interfaces. Otherwise one node: every peer is on this
  // host, so bind Gloo to loopback (works without a resolvable hostname); several nodes: Gloo's
  // default device binds to this host's address.
  GlooDevices devices;
  devices.interfaces = split_interface_names(launch.gloo_socket_ifname, "GLOO_SOCKET_IFNAME");
  require_host_interfaces(devices.interfaces, "GLOO_SOCKET_IFNAME");
  if (!launch.multi_node) devices.hostname = "127.0.0.1";
  return make_gloo_communicator(store, launch, devices, options);
}

#ifndef FINETUNE_WITH_GLOO
std::unique_ptr<Communicator> make_gloo_communicator(const c10::intrusive_ptr<c10d::Store>&, const LaunchEnv&,
                                                     const GlooDevices&, const CommunicatorOptions&) {
  throw UsageError("distributed backend 'gloo' (CPU) requested but this build has no Gloo headers: install "
                   "libgloo-dev (scripts/setup.sh does) and rebuild, or train on GPUs with NCCL");
}
#endif

#ifndef FINETUNE_WITH_CUDA
bool nccl_compiled_in() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(const c10::intrusive_ptr<c10d::Store>&, const LaunchEnv&,
                                                     const at::Device&, const CommunicatorOptions&) {
  throw UsageError("distributed backend 'nccl' requested but this build has no CUDA/NCCL support");
}
#endif

}  // namespace finetune
