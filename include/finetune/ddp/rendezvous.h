// Where the ranks meet (the TCPStore address), decided before the communicator is built:
//   - MASTER_ADDR / MASTER_PORT when given, or torchrun's agent store;
//   - under mpirun / PMI without MASTER_ADDR, in a build with MPI: rank 0's address and a free
//     port are broadcast over MPI_COMM_WORLD (works across nodes with no extra variables, and
//     two jobs on one node never collide on a default port);
//   - otherwise one node defaults to 127.0.0.1:29500, and a multi-node job without MASTER_ADDR
//     is an error that says which variables to pass.
// Holds the MPI session (if one was started) and finalises it on a clean exit; after an error it
// leaves MPI alone so that mpirun tears the job down instead of a finalize waiting on peers.
#pragma once

#include "finetune/launch/launch_env.h"

namespace finetune {

class Rendezvous {
 public:
  explicit Rendezvous(LaunchEnv launch);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  const LaunchEnv& launch() const { return launch_; }

 private:
  LaunchEnv launch_;
  bool mpi_started_ = false;
};

bool mpi_compiled_in();

}  // namespace finetune
