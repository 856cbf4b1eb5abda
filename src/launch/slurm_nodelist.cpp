#include "finetune/launch/slurm_nodelist.h"

#include <cctype>

#include "finetune/util/errors.h"

namespace finetune {
namespace {

bool is_digits(const std::string& text) {
  if (text.empty()) return false;
  for (const char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// The first number of a bracket's ranges "007-010,3" -> "007".
std::string first_of_ranges(const std::string& ranges, const std::string& nodelist, const std::string& variable) {
  const std::string first = ranges.substr(0, ranges.find_first_of(",-"));
  if (!is_digits(first)) {
    throw Error("launch environment: " + variable + "=\"" + nodelist + "\": '[" + ranges +
                "]' is not a list of numbers and ranges");
  }
  return first;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist, const std::string& variable) {
  std::string host;
  for (size_t pos = 0; pos < nodelist.size();) {
    const char c = nodelist[pos];
    if (c == ',') break;  // the end of the first host's expression
    if (c == ']') throw Error("launch environment: " + variable + "=\"" + nodelist + "\": unbalanced ']'");
    if (c != '[') {
      host += c;
      ++pos;
      continue;
    }
    const size_t close = nodelist.find(']', pos);
    if (close == std::string::npos) {
      throw Error("launch environment: " + variable + "=\"" + nodelist + "\": '[' without ']'");
    }
    host += first_of_ranges(nodelist.substr(pos + 1, close - pos - 1), nodelist, variable);
    pos = close + 1;
  }
  if (host.empty()) throw Error("launch environment: " + variable + "=\"" + nodelist + "\" names no host");
  return host;
}

std::optional<std::string> slurm_rank0_host(const EnvMap& env) {
  for (const char* variable : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    const std::string list = env_value(env, variable);
    if (!list.empty()) return first_slurm_host(list, variable);
  }
  return std::nullopt;
}

std::optional<int> slurm_job_port(const EnvMap& env) {
  const std::string job = env_value(env, "SLURM_JOB_ID");
  if (!is_digits(job)) return std::nullopt;
  return 15000 + std::stoi(job.substr(job.size() > 4 ? job.size() - 4 : 0));
}

}  // namespace finetune
