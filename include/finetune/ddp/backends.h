// The backend constructors behind make_communicator, exposed so that tests (and callers that
// already hold a store) can build a communicator on a store they created.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "finetune/ddp/communicator.h"

namespace finetune {

std::unique_ptr<Communicator> make_local_communicator();

// Where the Gloo transport binds: the interfaces named by GLOO_SOCKET_IFNAME (one device each, as
// torch.distributed does), else `hostname` (loopback on one node), else Gloo's default device (the
// address this host's name resolves to).
struct GlooDevices {
  std::vector<std::string> interfaces;
  std::string hostname;
};

// CPU collectives through c10d::ProcessGroupGloo.
std::unique_ptr<Communicator> make_gloo_communicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const LaunchEnv& launch, const GlooDevices& devices,
                                                     const CommunicatorOptions& options);

// True when this build has CUDA + NCCL (src/ddp/cuda is compiled in).
bool nccl_compiled_in();

// CUDA collectives through NCCL; the unique id travels through `store`. Only defined in CUDA
// builds (make_communicator checks nccl_compiled_in() first).
std::unique_ptr<Communicator> make_nccl_communicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const LaunchEnv& launch, const at::Device& device,
                                                     const CommunicatorOptions& options);

}  // namespace finetune
