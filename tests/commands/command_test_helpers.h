// Parsing argv in tests of the command layer.
#pragma once

#include <string>
#include <vector>

#include "finetune/config/options.h"

namespace finetune::testing {

// parse_command with argv = {"finetune", "--model_name", "m", "--dataset", "d.jsonl", extra...}.
inline Command parse_train_args(const std::vector<std::string>& extra, const EnvMap& env = {}) {
  std::vector<std::string> args = {"--model_name", "m", "--dataset", "d.jsonl"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<const char*> argv = {"finetune"};
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_command(static_cast<int>(argv.size()), argv.data(), env);
}

}  // namespace finetune::testing
