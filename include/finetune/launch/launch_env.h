// Who am I in the job? Derived purely from environment variables set by the launcher:
//   torchrun:       RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
//                   (+ TORCHELASTIC_USE_AGENT_STORE=True: the agent already runs the TCP store,
//                    and TORCHELASTIC_RESTART_COUNT says which attempt of the worker group we are)
//   OpenMPI:        OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK (_LOCAL_SIZE)
//   MPICH / PMI:    PMI_RANK PMI_SIZE MPI_LOCALRANKID (MPI_LOCALNRANKS)
//   Slurm (srun):   SLURM_PROCID SLURM_NTASKS SLURM_LOCALID (SLURM_NTASKS_PER_NODE)
//   none:           a single process.
// Single-node jobs default MASTER_ADDR to 127.0.0.1 and MASTER_PORT to 29500; srun jobs take the
// first node of their node list and a port from the job id (Note [Slurm rendezvous]). Partial or
// conflicting variables are an error naming them.
#pragma once

#include <string>

#include "finetune/launch/environment.h"

namespace finetune {

enum class Launcher { None, Torchrun, OpenMpi, Pmi, Slurm };

std::string launcher_name(Launcher launcher);

struct LaunchEnv {
  Launcher launcher = Launcher::None;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool master_addr_given = false;  // false: defaulted (fine on one node only)
  bool use_agent_store = false;    // torchrun's agent hosts the TCP store; we connect as a client
  int restart_count = 0;           // torchrun's TORCHELASTIC_RESTART_COUNT (0 on the first attempt)
  bool multi_node = false;         // world_size > local_world_size
  std::string gloo_socket_ifname;  // GLOO_SOCKET_IFNAME: the interfaces Gloo binds to ("" = its choice)
};

LaunchEnv launch_env_from(const EnvMap& env);

}  // namespace finetune
