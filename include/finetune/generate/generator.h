// Batched decoding with a KV cache (model/kv_cache.h), as transformers' generate() does it:
// prompts of a batch are left-padded with the pad id, the attention mask is 0 on padding and the
// position ids are cumsum(mask) - 1 (0 on padding); the prompt runs in one forward (prefill), then
// one token per step (decode). Every row takes part in every step until all rows have finished
// (a finished row is fed the pad id, as transformers does), so one multinomial draw per step covers
// all rows, in transformers' order.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "finetune/generate/generation_config.h"
#include "finetune/generate/sampler.h"
#include "finetune/model/causal_lm.h"
#include "finetune/tokenizer/tokenizer.h"
#include "finetune/train/step_profiler.h"

namespace finetune {

struct GeneratedText {
  std::vector<int32_t> token_ids;  // new ids, through the EOS id or the token completing a stop string
  std::string text;                // decoded without special tokens, cut before a stop string
  std::string finish_reason;       // "eos" | "stop" | "length"
};

struct GenerationStats {
  int64_t prefill_tokens = 0;  // prompt tokens (padding excluded)
  double prefill_seconds = 0;  // prompt forwards and their first tokens
  int64_t decode_tokens = 0;   // tokens of unfinished rows produced by decode steps
  double decode_seconds = 0;
};

// Called after each step for each row still running: (row in the batch, its text so far).
using TextCallback = std::function<void(size_t row, const std::string& text)>;

class Generator {
 public:
  // eos_ids: stop_criteria.h eos_token_ids; pad_id: left padding and finished rows' input.
  Generator(const CausalLM& model, const Tokenizer& tokenizer, GenerationConfig config, std::set<int64_t> eos_ids,
            int64_t pad_id);

  // One batch, decoded together (any size; config.batch_size is the caller's to apply).
  std::vector<GeneratedText> generate_batch(const std::vector<std::vector<int32_t>>& prompts,
                                            const TextCallback& on_text = {});

  const GenerationStats& stats() const { return stats_; }
  const GenerationConfig& config() const { return config_; }

 private:
  const CausalLM& model_;
  const Tokenizer& tokenizer_;
  GenerationConfig config_;
  std::set<int64_t> eos_ids_;
  int64_t pad_id_;
  TokenSampler sampler_;  // one generator for the whole run: batches continue its stream
  GenerationStats stats_;
  StepProfiler profiler_;   // decode steps, counted over the run's batches
  int64_t decode_steps_ = 0;
};

}  // namespace finetune
