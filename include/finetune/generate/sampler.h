// The next token from processed scores: argmax (greedy), or one draw from softmax(scores) by
// at::multinomial with the sampler's own generator, seeded once from --seed. On the CPU the
// generator is the same Mersenne Twister as torch.manual_seed(seed)'s, and one multinomial over
// all rows per step is transformers' draw order, so sampled ids match generate(do_sample=True)
// after torch.manual_seed(seed) (up to scores that differ in the last bits).
#pragma once

#include <ATen/ATen.h>

#include "finetune/generate/generation_config.h"

namespace finetune {

class TokenSampler {
 public:
  TokenSampler(const GenerationConfig& config, const at::Device& device);

  // scores: (B, V) fp32 after process_logits -> (B) int64 on the scores' device.
  at::Tensor next_tokens(const at::Tensor& scores);

 private:
  bool sampling_;
  at::Generator generator_;  // undefined when greedy
};

}  // namespace finetune
