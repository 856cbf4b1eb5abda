#include "option_environment.h"

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "finetune/util/errors.h"
#include "finetune/util/text.h"
#include "option_values.h"

namespace finetune {
namespace {

// The FINETUNE_* variables that are not options, and why finetune sees them: the project's
// scripts export them into the environment the binary runs in (a test run sources build/env.sh,
// then runs the binary). Anything added here must be something a script sets; keep the reason.
const std::vector<std::pair<std::string, std::string>>& tolerated_variables() {
  static const std::vector<std::pair<std::string, std::string>> variables = {
      {"FINETUNE_ROOT", "scripts/setup.sh writes it into build/env.sh"},
      {"FINETUNE_BUILD_DIR", "scripts/setup.sh and scripts/test.sh: the build directory (build/env.sh)"},
      {"FINETUNE_PYTHON", "scripts/setup.sh writes it into build/env.sh: the reference Python"},
      {"FINETUNE_BIN", "scripts/setup.sh writes it into build/env.sh; tests and scripts/demo.sh run it"},
      {"FINETUNE_VENV", "scripts/setup.sh: where the Python environment lives"},
      {"FINETUNE_SKIP_APT", "scripts/setup.sh: do not install system packages"},
      {"FINETUNE_CMAKE_ARGS", "scripts/setup.sh: extra cmake arguments"},
      {"FINETUNE_JOBS", "scripts/setup.sh: build parallelism"},
      {"FINETUNE_BUILD_TARGET", "scripts/setup.sh: build only this target (e.g. finetune)"},
      {"FINETUNE_FIXTURES", "scripts/test.sh: the reference fixtures the tests read"},
      {"FINETUNE_PYTEST_ARGS", "scripts/test.sh: extra pytest arguments"},
      {"FINETUNE_FUZZ_SECONDS", "scripts/test.sh: the fuzzer's time per parser"},
      {"FINETUNE_CUDA_MEMORY_HISTORY", "bench/gpu_memory_snapshot.sh: where train writes the CUDA allocator's history"},
      {"FINETUNE_LONG_ROW_ATTENTION",
       "long single-sample rows' attention per KV head: cudnn (the default) or flash "
       "(read into the kernel policy, model/kernel_policy.h)"},
      {"FINETUNE_NORM_ROPE_KERNEL",
       "fused (the default: Qwen3's per-head q/k RMSNorm and RoPE as one CUDA kernel) or aten (ATen's "
       "RMSNorm, then the fused RoPE; read into the kernel policy, model/kernel_policy.h)"},
      {"FINETUNE_GRAPHED_ALL_REDUCE",
       "bench/gpu_rank_contention.sh: after_replay (the default) or overlapped, the gradient all-reduce of "
       "graphed micro-steps (read by the train command, commands/train_command.cpp)"},
      {"FINETUNE_CUDA_GRAPH_MAX_TOKENS",
       "bench/gpu_moe_speed.sh: the longest micro-step replayed from a CUDA graph, in tokens (read by "
       "the train command, commands/train_command.cpp)"},
      {"FINETUNE_LLAMA_LORA_LOGITS", "scripts/test.sh: the llama.cpp LoRA driver it builds for tests/e2e"},
      {"FINETUNE_SKIP_SETUP", "scripts/demo.sh: do not run setup.sh"},
      {"FINETUNE_DEMO_DIR", "scripts/demo.sh: where the demo writes"},
  };
  return variables;
}

}  // namespace

std::string option_env_key(const std::string& option_name) {
  std::string key = "FINETUNE_";
  for (unsigned char c : option_name) key += static_cast<char>(std::toupper(c));
  return key;
}

void check_finetune_environment(const EnvMap& env) {
  const std::string prefix = "FINETUNE_";
  // The known names without the prefix (so it does not count towards "close enough"), options first
  // so that a tie goes to an option.
  std::vector<std::string> known;
  for (const auto& row : option_rows()) {
    known.push_back(option_env_key(row.spec.name).substr(prefix.size()));
    for (const auto& alias : row.spec.aliases) known.push_back(option_env_key(alias).substr(prefix.size()));
  }
  for (const auto& [name, reason] : tolerated_variables()) known.push_back(name.substr(prefix.size()));

  for (const auto& [key, value] : env) {  // EnvMap is ordered: the first unknown name is reported
    if (!starts_with(key, prefix)) continue;
    const std::string rest = key.substr(prefix.size());
    if (std::find(known.begin(), known.end(), rest) != known.end()) continue;
    std::string message = key + ": unknown environment variable (FINETUNE_<OPTION> sets an option, see finetune "
                                "--help; no option is named " + lowercase(rest) + ")";
    if (const auto suggestion = closest_match(rest, known)) message += "; did you mean " + prefix + *suggestion + "?";
    throw UsageError(message);
  }
}

}  // namespace finetune
