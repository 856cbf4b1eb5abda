// The backend constructors behind make_communicator, exposed so that tests (and callers that
// already hold a store) can build a communicator on a store they created.
#pragma once

#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "finetune/ddp/communicator.h"

namespace finetune {

std::unique_ptr<Communicator> make_local_communicator();

// CPU collectives through c10d::ProcessGroupGloo. `gloo_hostname` is the address the Gloo
// transport binds to (loopback on one node); empty: Gloo's default device (this host's name).
std::unique_ptr<Communicator> make_gloo_communicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const LaunchEnv& launch, const std::string& gloo_hostname,
                                                     const CommunicatorOptions& options);

// True when this build has CUDA + NCCL (src/ddp/cuda is compiled in).
bool nccl_compiled_in();

// CUDA collectives through NCCL; the unique id travels through `store`. Only defined in CUDA
// builds (make_communicator checks nccl_compiled_in() first).
std::unique_ptr<Communicator> make_nccl_communicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const LaunchEnv& launch, const at::Device& device,
                                                     const CommunicatorOptions& options);

}  // namespace finetune
