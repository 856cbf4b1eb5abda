// Slurm hostlist expressions as scontrol show hostnames expands them (the first host only).
#include <gtest/gtest.h>

#include "../test_support.h"

#include "finetune/launch/launch_env.h"
#include "finetune/launch/slurm_nodelist.h"

namespace finetune {
namespace {

TEST(SlurmNodelistTest, FirstHostOfEachForm) {
  const std::pair<const char*, const char*> cases[] = {
      {"node1", "node1"},
      {"node1,node2", "node1"},
      {"gpu[01-04]", "gpu01"},
      {"gpu[007-010,3]", "gpu007"},
      {"gpu[3,1-2]-ib", "gpu3-ib"},
      {"rack[2-3]-node[01-04],login", "rack2-node01"},
      {"a-b.example.com,c", "a-b.example.com"},
  };
  for (const auto& [list, first] : cases) EXPECT_EQ(first_slurm_host(list, "SLURM_JOB_NODELIST"), first) << list;
}

TEST(SlurmNodelistTest, MalformedListsNameTheVariable) {
  for (const char* list : {"gpu[01-04", "gpu]", "gpu[a-b]", "gpu[]", ",node2", ""}) {
    const std::string message = testing::error_message([&] { first_slurm_host(list, "SLURM_STEP_NODELIST"); });
    EXPECT_NE(message.find("SLURM_STEP_NODELIST"), std::string::npos) << list << ": " << message;
  }
}

TEST(SlurmNodelistTest, StepListBeforeJobList) {
  EXPECT_EQ(slurm_rank0_host({{"SLURM_JOB_NODELIST", "j[1-2]"}, {"SLURM_STEP_NODELIST", "s[5-6]"}}), "s5");
  EXPECT_EQ(slurm_rank0_host({{"SLURM_NODELIST", "n[1-2]"}}), "n1");
  EXPECT_FALSE(slurm_rank0_host({}).has_value());
}

TEST(SlurmNodelistTest, JobPortFromTheLastFourDigits) {
  EXPECT_EQ(slurm_job_port({{"SLURM_JOB_ID", "1234567"}}), 19567);
  EXPECT_EQ(slurm_job_port({{"SLURM_JOB_ID", "77"}}), 15077);
  EXPECT_FALSE(slurm_job_port({{"SLURM_JOB_ID", "77_3"}}).has_value());
  EXPECT_FALSE(slurm_job_port({}).has_value());
}

// Two nodes of two tasks, no MASTER_ADDR: the ranks meet on the node list's first node.
TEST(SlurmNodelistTest, MultiNodeSrunWithoutMasterAddrUsesTheFirstNode) {
  const EnvMap env = {{"SLURM_JOB_ID", "4242"},          {"SLURM_STEP_ID", "0"},
                      {"SLURM_PROCID", "3"},             {"SLURM_NTASKS", "4"},
                      {"SLURM_LOCALID", "1"},            {"SLURM_NODEID", "1"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}, {"SLURM_STEP_NODELIST", "gpu[17-18]"}};
  const LaunchEnv launch = launch_env_from(env);
  EXPECT_TRUE(launch.multi_node);
  EXPECT_TRUE(launch.master_addr_given);
  EXPECT_EQ(launch.master_addr, "gpu17");
  EXPECT_EQ(launch.master_port, 19242);

  EnvMap given = env;
  given["MASTER_ADDR"] = "head";
  given["MASTER_PORT"] = "29511";
  const LaunchEnv explicit_launch = launch_env_from(given);
  EXPECT_EQ(explicit_launch.master_addr, "head");
  EXPECT_EQ(explicit_launch.master_port, 29511);
}

}  // namespace
}  // namespace finetune
