// LaunchEnv from launcher environment variables.
//
// Note [Launcher detection]
// Each launcher is recognised by its own variables, in the order torchrun, OpenMPI, PMI, Slurm;
// the first one present decides. Variables of the other launchers must agree with it, with one
// exception: torchrun started under srun/mpirun (one agent task per node, several workers each) —
// there the outer launcher sees fewer processes than torchrun, and torchrun's view is the real one.
// Any other disagreement means stale variables (e.g. RANK exported in the shell of an mpirun job),
// which would make several processes claim the same rank and hang; it is an error.
//
// Slurm counts only inside an srun step (SLURM_STEP_ID set): an sbatch script run without srun
// also carries SLURM_PROCID/SLURM_NTASKS, yet is a single process.
#include "finetune/launch/launch_env.h"

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <vector>

#include "finetune/launch/slurm_nodelist.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// One launcher's view of the job, with the variable names it came from (for messages).
struct LauncherView {
  Launcher launcher = Launcher::None;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string rank_var, world_var;
};

const std::string* lookup(const EnvMap& env, const std::string& key) {
  const auto it = env.find(key);
  return it == env.end() ? nullptr : &it->second;
}

int parse_non_negative(const std::string& key, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < 0 || value > 1 << 30)
    throw Error("launch environment: " + key + "=\"" + text + "\" is not a non-negative integer");
  return static_cast<int>(value);
}

int required_int(const EnvMap& env, const std::string& key, const std::string& launcher,
                 const std::string& seen) {
  const std::string* value = lookup(env, key);
  if (value == nullptr)
    throw Error("launch environment: " + launcher + " variable " + seen + " is set but " + key + " is missing");
  return parse_non_negative(key, *value);
}

std::optional<int> optional_int(const EnvMap& env, const std::string& key) {
  const std::string* value = lookup(env, key);
  if (value == nullptr) return std::nullopt;
  return parse_non_negative(key, *value);
}

// The generic shape shared by torchrun, OpenMPI and PMI: rank, size, local rank required once any
// of them is present; the local size is optional (absent: assumed one node).
std::optional<LauncherView> read_view(const EnvMap& env, Launcher launcher, const std::string& rank_var,
                                      const std::string& world_var, const std::string& local_rank_var,
                                      const std::string& local_world_var) {
  std::string seen;
  for (const auto* key : {&rank_var, &world_var, &local_rank_var, &local_world_var})
    if (lookup(env, *key) != nullptr) {
      seen = *key;
      break;
    }
  if (seen.empty()) return std::nullopt;
  const std::string name = launcher_name(launcher);
  LauncherView view;
  view.launcher = launcher;
  view.rank_var = rank_var;
  view.world_var = world_var;
  view.rank = required_int(env, rank_var, name, seen);
  view.world_size = required_int(env, world_var, name, seen);
  view.local_rank = required_int(env, local_rank_var, name, seen);
  view.local_world_size = optional_int(env, local_world_var).value_or(view.world_size);
  return view;
}

// Slurm's "2(x3),1" task-per-node lists, expanded and indexed by this node's id.
std::optional<int> slurm_tasks_on_node(const std::string& key, const std::string& spec, int node_id) {
  std::vector<int> per_node;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    const std::string item = spec.substr(pos, comma - pos);
    const size_t paren = item.find("(x");
    const int count = parse_non_negative(key, item.substr(0, paren));
    int repeat = 1;
    if (paren != std::string::npos) {
      if (item.back() != ')') throw Error("launch environment: " + key + "=\"" + spec + "\" is malformed");
      repeat = parse_non_negative(key, item.substr(paren + 2, item.size() - paren - 3));
    }
    per_node.insert(per_node.end(), repeat, count);
    pos = comma + 1;
  }
  if (node_id < 0 || node_id >= static_cast<int>(per_node.size())) return std::nullopt;
  return per_node[node_id];
}

std::optional<LauncherView> read_slurm(const EnvMap& env) {
  const std::string* step = lookup(env, "SLURM_STEP_ID");
  if (step == nullptr) step = lookup(env, "SLURM_STEPID");
  if (step == nullptr) return std::nullopt;  // sbatch script without srun: one process
  LauncherView view;
  view.launcher = Launcher::Slurm;
  view.rank_var = "SLURM_PROCID";
  view.world_var = lookup(env, "SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  view.rank = required_int(env, view.rank_var, "Slurm", "SLURM_STEP_ID");
  view.world_size = required_int(env, view.world_var, "Slurm", "SLURM_STEP_ID");
  view.local_rank = required_int(env, "SLURM_LOCALID", "Slurm", "SLURM_STEP_ID");
  const int node_id = optional_int(env, "SLURM_NODEID").value_or(0);
  std::optional<int> local_world;
  for (const char* key : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (local_world) break;
    if (const std::string* spec = lookup(env, key)) local_world = slurm_tasks_on_node(key, *spec, node_id);
  }
  if (!local_world) local_world = optional_int(env, "SLURM_NTASKS_PER_NODE");
  if (!local_world) {
    std::optional<int> nodes = optional_int(env, "SLURM_STEP_NUM_NODES");
    if (!nodes) nodes = optional_int(env, "SLURM_NNODES");
    if (nodes.value_or(1) != 1)
      throw Error("launch environment: Slurm step spans " + std::to_string(*nodes) +
                  " nodes but no SLURM_STEP_TASKS_PER_NODE / SLURM_NTASKS_PER_NODE says how many tasks run per node");
    local_world = view.world_size;
  }
  view.local_world_size = *local_world;
  return view;
}

// Note [Slurm rendezvous]
// An srun job without MASTER_ADDR meets at the first node of its node list (srun starts task 0
// there), on MASTER_PORT or else 15000 + the job id's last four digits, so that two jobs sharing a
// node don't collide on one port. MASTER_ADDR/MASTER_PORT, when set, win.
void apply_slurm_rendezvous(const EnvMap& env, LaunchEnv& out) {
  if (!out.master_addr_given && out.multi_node) {
    if (const auto host = slurm_rank0_host(env)) {
      out.master_addr = *host;
      out.master_addr_given = true;
    }
  }
  if (lookup(env, "MASTER_PORT") == nullptr)
    if (const auto port = slurm_job_port(env)) out.master_port = *port;
}

std::string describe(const LauncherView& v) {
  return launcher_name(v.launcher) + " says rank " + std::to_string(v.rank) + " of " + std::to_string(v.world_size) +
         " (" + v.rank_var + ", " + v.world_var + ")";
}

void validate(const LauncherView& v) {
  const std::string name = launcher_name(v.launcher);
  if (v.world_size < 1) throw Error("launch environment: " + v.world_var + " must be >= 1, got 0");
  if (v.rank >= v.world_size)
    throw Error("launch environment: " + v.rank_var + "=" + std::to_string(v.rank) + " is not below " + v.world_var +
                "=" + std::to_string(v.world_size));
  if (v.local_world_size < 1 || v.local_world_size > v.world_size)
    throw Error("launch environment: " + name + " local world size " + std::to_string(v.local_world_size) +
                " is not in [1, " + std::to_string(v.world_size) + "]");
  if (v.local_rank >= v.local_world_size)
    throw Error("launch environment: " + name + " local rank " + std::to_string(v.local_rank) +
                " is not below the local world size " + std::to_string(v.local_world_size));
}

}  // namespace

std::string launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::None: return "none";
    case Launcher::Torchrun: return "torchrun";
    case Launcher::OpenMpi: return "OpenMPI";
    case Launcher::Pmi: return "PMI";
    case Launcher::Slurm: return "Slurm";
  }
  return "unknown";
}

LaunchEnv launch_env_from(const EnvMap& env) {
  std::vector<LauncherView> views;
  for (auto view : {read_view(env, Launcher::Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
                    read_view(env, Launcher::OpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                              "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
                    read_view(env, Launcher::Pmi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
                    read_slurm(env)})
    if (view) views.push_back(*view);

  LaunchEnv out;
  if (!views.empty()) {
    const LauncherView& chosen = views.front();  // Note [Launcher detection]
    for (size_t i = 1; i < views.size(); ++i) {
      const LauncherView& other = views[i];
      const bool agree = other.rank == chosen.rank && other.world_size == chosen.world_size;
      const bool torchrun_under_outer_launcher =
          chosen.launcher == Launcher::Torchrun && other.world_size < chosen.world_size;
      if (!agree && !torchrun_under_outer_launcher)
        throw Error("launch environment: conflicting launcher variables: " + describe(chosen) + " but " +
                    describe(other));
    }
    validate(chosen);
    out.launcher = chosen.launcher;
    out.rank = chosen.rank;
    out.world_size = chosen.world_size;
    out.local_rank = chosen.local_rank;
    out.local_world_size = chosen.local_world_size;
  }

  if (const std::string* addr = lookup(env, "MASTER_ADDR"); addr != nullptr && !addr->empty()) {
    out.master_addr = *addr;
    out.master_addr_given = true;
  }
  if (const std::string* port = lookup(env, "MASTER_PORT"); port != nullptr) {
    errno = 0;
    char* end = nullptr;
    const long value = std::strtol(port->c_str(), &end, 10);
    if (port->empty() || *end != '\0' || errno == ERANGE || value < 1 || value > 65535)
      throw Error("launch environment: MASTER_PORT=\"" + *port + "\" is not a port number in [1, 65535]");
    out.master_port = static_cast<int>(value);
  }
  out.multi_node = out.world_size > out.local_world_size;
  if (out.launcher == Launcher::Slurm) apply_slurm_rendezvous(env, out);
  out.gloo_socket_ifname = env_value(env, "GLOO_SOCKET_IFNAME");
  // mpirun / PMI jobs may find their rendezvous over MPI instead (dist/rendezvous.h decides).
  const bool mpi_launch = out.launcher == Launcher::OpenMpi || out.launcher == Launcher::Pmi;
  if (out.multi_node && !out.master_addr_given && !mpi_launch)
    throw Error("launch environment: a multi-node job (" + std::to_string(out.world_size) + " processes, " +
                std::to_string(out.local_world_size) + " on this node) needs MASTER_ADDR (the rank-0 host)");
  if (const std::string* agent = lookup(env, "TORCHELASTIC_USE_AGENT_STORE"))
    out.use_agent_store = out.launcher == Launcher::Torchrun && (*agent == "True" || *agent == "true" || *agent == "1");
  if (out.launcher == Launcher::Torchrun)
    out.restart_count = optional_int(env, "TORCHELASTIC_RESTART_COUNT").value_or(0);
  return out;
}

}  // namespace finetune
