// The fuzzed parsers: one target per input kind, each with valid seed inputs (generated here, not
// committed), a dictionary of tokens for the mutator, and a run function that feeds one input to
// the parser the way the program reads it (written to a file in a scratch directory where the
// program reads a file) and then uses what was parsed a little (encode/decode, tensor bytes).
// run() either returns (accepted) or throws; finetune::Error is the only acceptable exception.
#pragma once

#include <string>
#include <vector>

namespace finetune::fuzz {

struct FuzzTarget {
  const char* name;
  const char* what;  // the parser, for --list
  std::vector<std::string> (*seeds)();
  std::vector<std::string> dictionary;
  void (*run)(const std::string& input, const std::string& scratch_dir);
};

const std::vector<FuzzTarget>& fuzz_targets();

}  // namespace finetune::fuzz
