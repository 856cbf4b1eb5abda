// Slurm's node lists ("gpu[01-04,07],login1", SLURM_STEP_NODELIST / SLURM_JOB_NODELIST): the first
// host, which an srun job without MASTER_ADDR takes as its rank-0 host (srun places task 0 on the
// list's first node), and the rendezvous port derived from the job id.
#pragma once

#include <optional>
#include <string>

#include "finetune/launch/environment.h"

namespace finetune {

// The first host a Slurm hostlist expression names: "gpu[007-010,3]-ib" -> "gpu007-ib" (every
// bracket takes its first number, zero padding kept). Throws naming `variable` on a malformed list.
std::string first_slurm_host(const std::string& nodelist, const std::string& variable);

// The first host of SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST, else SLURM_NODELIST; nullopt
// when none is set.
std::optional<std::string> slurm_rank0_host(const EnvMap& env);

// 15000 + the last four digits of SLURM_JOB_ID (the rule PyTorch Lightning uses), so that two jobs
// sharing a node do not meet on one port; nullopt without a numeric SLURM_JOB_ID.
std::optional<int> slurm_job_port(const EnvMap& env);

}  // namespace finetune
