// How `finetune generate` and `finetune chat` decode: greedy when temperature is 0, else sampling
// with transformers' warpers (logits_processors.h). Made from the options by
// generation_config_from (commands/stage_configs.h).
//
// A model's generation_config.json may carry its own do_sample / temperature / top_p defaults,
// which transformers' generate() applies when the caller passes none; we follow our flags only, so
// a run's decoding is what its command line says. Only the EOS ids are read from that file
// (eos_tokens.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace finetune {

struct GenerationConfig {
  int64_t max_new_tokens = 256;
  double temperature = 0.0;  // 0: greedy
  double top_p = 1.0;        // 1: off
  int64_t top_k = 0;         // 0: off
  double repetition_penalty = 1.0;  // 1: off; applies to greedy decoding too, as in transformers
  std::vector<std::string> stop_strings;
  int64_t batch_size = 8;  // prompts decoded together
  uint64_t seed = 3407;    // of the sampling generator
  // Kineto profile of decode steps profile_start_step .. + profile_steps - 1 (1-based, counted over
  // the run's batches; 0: off), written to profile_dir as training's (train/step_profiler.h).
  int64_t profile_start_step = 0;
  int64_t profile_steps = 3;
  std::string profile_dir = "outputs";

  bool sampling() const { return temperature > 0; }
};

// --stop: a JSON list of strings (a value starting with '['), else the value itself as one
// string; "" is none. UsageError for a list that is not strings or holds an empty string.
std::vector<std::string> parse_stop_strings(const std::string& value);

}  // namespace finetune
