// Parsing argv in tests: shared by the option parser's tests and the command layer's.
#pragma once

#include <string>
#include <vector>

#include "finetune/config/options.h"

namespace finetune::testing {

// Calls parse_command with argv = {"finetune", args...}.
inline Command parse_args(const std::vector<std::string>& args, const EnvMap& env = {}) {
  std::vector<const char*> argv = {"finetune"};
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_command(static_cast<int>(argv.size()), argv.data(), env);
}

// The minimal valid training command plus `extra`.
inline Command parse_train(const std::vector<std::string>& extra, const EnvMap& env = {}) {
  std::vector<std::string> args = {"--model_name", "m", "--dataset", "d.jsonl"};
  args.insert(args.end(), extra.begin(), extra.end());
  return parse_args(args, env);
}

}  // namespace finetune::testing
