// LaunchEnv detection: one table row per launcher layout, then each error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "finetune/launch/launch_env.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

struct LaunchCase {
  std::string name;
  EnvMap env;
  Launcher launcher;
  int rank, world_size, local_rank, local_world_size;
  bool multi_node;
};

TEST(LaunchEnvTest, DetectsEachLauncher) {
  const std::vector<LaunchCase> cases = {
      {"nothing", {}, Launcher::None, 0, 1, 0, 1, false},
      {"unrelated variables", {{"PATH", "/bin"}, {"HOME", "/root"}}, Launcher::None, 0, 1, 0, 1, false},
      {"torchrun single node",
       {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "4"}},
       Launcher::Torchrun, 3, 4, 3, 4, false},
      {"torchrun two nodes",
       {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
        {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29400"}},
       Launcher::Torchrun, 5, 8, 1, 4, true},
      {"torchrun without LOCAL_WORLD_SIZE",
       {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}}, Launcher::Torchrun, 1, 2, 1, 2, false},
      {"OpenMPI",
       {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}},
       Launcher::OpenMpi, 2, 4, 0, 2, true},
      {"MPICH/PMI",
       {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}},
       Launcher::Pmi, 1, 2, 1, 2, false},
      {"srun one node",
       {{"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},
        {"SLURM_LOCALID", "1"}, {"SLURM_STEP_TASKS_PER_NODE", "2"}, {"SLURM_NODEID", "0"}},
       Launcher::Slurm, 1, 2, 1, 2, false},
      {"srun three nodes, uneven",
       {{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "5"}, {"SLURM_STEP_NUM_TASKS", "6"}, {"SLURM_NTASKS", "6"},
        {"SLURM_LOCALID", "0"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"}, {"SLURM_NODEID", "2"},
        {"MASTER_ADDR", "n0"}},
       Launcher::Slurm, 5, 6, 0, 1, true},
      {"srun with SLURM_NTASKS_PER_NODE only",
       {{"SLURM_STEP_ID", "3"}, {"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"},
        {"SLURM_NTASKS_PER_NODE", "2"}, {"MASTER_ADDR", "n0"}},
       Launcher::Slurm, 2, 4, 0, 2, true},
      {"srun single node without per-node counts",
       {{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
        {"SLURM_NNODES", "1"}},
       Launcher::Slurm, 0, 2, 0, 2, false},
      // An sbatch script run directly (no srun) carries job-level variables but is one process.
      {"sbatch without srun",
       {{"SLURM_JOB_ID", "77"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}},
       Launcher::None, 0, 1, 0, 1, false},
      // torchrun started by srun (one agent per node): torchrun's view wins.
      {"torchrun under srun",
       {{"RANK", "6"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "4"},
        {"MASTER_ADDR", "n0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},
        {"SLURM_LOCALID", "0"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}, {"SLURM_NODEID", "1"}},
       Launcher::Torchrun, 6, 8, 2, 4, true},
      // mpirun across nodes without MASTER_ADDR: allowed here, the rendezvous goes over MPI.
      {"multi-node mpirun without MASTER_ADDR",
       {{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}},
       Launcher::OpenMpi, 5, 8, 1, 4, true},
      // srun --mpi=pmi2 sets both Slurm and PMI variables; they agree.
      {"PMI and Slurm agreeing",
       {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"},
        {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}},
       Launcher::Pmi, 1, 2, 1, 2, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const LaunchEnv e = launch_env_from(c.env);
    EXPECT_EQ(e.launcher, c.launcher) << launcher_name(e.launcher);
    EXPECT_EQ(e.rank, c.rank);
    EXPECT_EQ(e.world_size, c.world_size);
    EXPECT_EQ(e.local_rank, c.local_rank);
    EXPECT_EQ(e.local_world_size, c.local_world_size);
    EXPECT_EQ(e.multi_node, c.multi_node);
  }
}

TEST(LaunchEnvTest, MasterDefaultsAndOverrides) {
  LaunchEnv e = launch_env_from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}});
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_FALSE(e.master_addr_given);
  EXPECT_FALSE(e.use_agent_store);

  e = launch_env_from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "host-a"},
                       {"MASTER_PORT", "1234"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_EQ(e.master_addr, "host-a");
  EXPECT_TRUE(e.master_addr_given);
  EXPECT_EQ(e.master_port, 1234);
  EXPECT_TRUE(e.use_agent_store);

  e = launch_env_from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"},
                       {"TORCHELASTIC_USE_AGENT_STORE", "False"}});
  EXPECT_FALSE(e.use_agent_store);
}

TEST(LaunchEnvTest, GlooSocketIfnameIsCarried) {
  EXPECT_EQ(launch_env_from({}).gloo_socket_ifname, "");
  EXPECT_EQ(launch_env_from({{"GLOO_SOCKET_IFNAME", "ib0,ib1"}}).gloo_socket_ifname, "ib0,ib1");
}

TEST(LaunchEnvTest, TorchrunRestartCount) {
  const EnvMap torchrun{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  EXPECT_EQ(launch_env_from(torchrun).restart_count, 0);
  EnvMap restarted = torchrun;
  restarted["TORCHELASTIC_RESTART_COUNT"] = "2";
  EXPECT_EQ(launch_env_from(restarted).restart_count, 2);
  restarted["TORCHELASTIC_RESTART_COUNT"] = "x";
  EXPECT_THROW(
      {
        try {
          launch_env_from(restarted);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("TORCHELASTIC_RESTART_COUNT"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  // Only torchrun's own jobs: a stale variable in an mpirun job's shell means nothing.
  EXPECT_EQ(launch_env_from({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"TORCHELASTIC_RESTART_COUNT", "3"}})
                .restart_count,
            0);
}

TEST(LaunchEnvTest, LauncherNames) {
  EXPECT_EQ(launcher_name(Launcher::None), "none");
  EXPECT_EQ(launcher_name(Launcher::Torchrun), "torchrun");
  EXPECT_EQ(launcher_name(Launcher::OpenMpi), "OpenMPI");
  EXPECT_EQ(launcher_name(Launcher::Pmi), "PMI");
  EXPECT_EQ(launcher_name(Launcher::Slurm), "Slurm");
}

struct ErrorCase {
  std::string name;
  EnvMap env;
  std::vector<std::string> expected_parts;  // every one must appear in the message
};

TEST(LaunchEnvTest, ErrorsNameTheVariables) {
  const std::vector<ErrorCase> cases = {
      {"RANK without WORLD_SIZE", {{"RANK", "0"}, {"LOCAL_RANK", "0"}}, {"WORLD_SIZE", "missing"}},
      {"WORLD_SIZE without RANK", {{"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}, {"RANK", "missing"}},
      {"no LOCAL_RANK", {{"RANK", "0"}, {"WORLD_SIZE", "2"}}, {"LOCAL_RANK"}},
      {"OpenMPI partial", {{"OMPI_COMM_WORLD_RANK", "0"}}, {"OMPI_COMM_WORLD_SIZE"}},
      {"PMI partial", {{"PMI_SIZE", "2"}}, {"PMI_RANK"}},
      {"srun without SLURM_LOCALID", {{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}},
       {"SLURM_LOCALID"}},
      {"not an integer", {{"RANK", "one"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}, {"RANK", "one"}},
      {"negative", {{"RANK", "-1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}, {"RANK", "-1"}},
      {"rank out of range", {{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}, {"RANK=2", "WORLD_SIZE=2"}},
      {"zero world", {{"RANK", "0"}, {"WORLD_SIZE", "0"}, {"LOCAL_RANK", "0"}}, {"WORLD_SIZE"}},
      {"local rank out of range",
       {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}, {"local rank 2"}},
      {"local world larger than world",
       {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}}, {"local world size 4"}},
      {"bad port", {{"MASTER_PORT", "http"}}, {"MASTER_PORT", "http"}},
      {"port zero", {{"MASTER_PORT", "0"}}, {"MASTER_PORT"}},
      {"port too large", {{"MASTER_PORT", "65536"}}, {"MASTER_PORT", "65536"}},
      {"multi-node without MASTER_ADDR",
       {{"RANK", "4"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}}, {"MASTER_ADDR"}},
      {"stale torchrun variables under mpirun",
       {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_RANK", "3"},
        {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}},
       {"torchrun", "OpenMPI", "RANK", "OMPI_COMM_WORLD_RANK"}},
      {"MPI and Slurm disagreeing",
       {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
        {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}},
       {"OpenMPI", "Slurm", "rank 1 of 2", "rank 0 of 2"}},
      {"multi-node srun without per-node counts",
       {{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"},
        {"SLURM_NNODES", "2"}},
       {"SLURM_NTASKS_PER_NODE"}},
      {"malformed tasks per node",
       {{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"},
        {"SLURM_STEP_TASKS_PER_NODE", "2(x2"}},
       {"SLURM_STEP_TASKS_PER_NODE"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    try {
      launch_env_from(c.env);
      ADD_FAILURE() << "expected an Error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      for (const auto& part : c.expected_parts) EXPECT_NE(msg.find(part), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace finetune
