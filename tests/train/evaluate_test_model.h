// A tiny random Llama with LoRA and a few samples, shared by the evaluation tests.
#pragma once

#include <ATen/CPUGeneratorImpl.h>

#include <memory>
#include <string>
#include <vector>

#include "trainer_test_model.h"
#include "finetune/data/sample.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"

namespace finetune::evaluate_test {

// The trainer tests' tiny model (trainer_test_model.h) with its own seed and targets; every call
// (every rank) builds the same weights.
inline std::unique_ptr<CausalLM> random_model() { return testing::tiny_lora_model(0.0, 11, {"q_proj", "v_proj"}); }

inline std::vector<Sample> samples() {
  return {{{5, 6, 7, 8, 9}, {-100, -100, 7, 8, 9}},
          {{10, 11, 12}, {10, 11, 12}},
          {{13, 14, 15, 16, 17, 18, 19}, {-100, 14, -100, 16, 17, 18, 19}},
          {{20, 21}, {20, 21}},
          {{30, 31, 32, 33}, {30, 31, 32, 33}}};
}

}  // namespace finetune::evaluate_test
