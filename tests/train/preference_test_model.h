// The tiny Llama with a PEFT LoRA adapter and the pairs that the preference objectives are
// compared with TRL on (tests/reference/make_preference_fixtures.py, objective/).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../reference/fixtures.h"
#include "finetune/checkpoint/adapter_io.h"
#include "finetune/data/batch.h"
#include "finetune/io/model_config.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/model/causal_lm.h"
#include "finetune/weights/model_weights.h"

namespace finetune::testing {

inline std::string preference_objective_dir(const std::string& leaf) {
  return reference::fixture_path("preference", "objective/" + leaf);
}

// The base model with PEFT's saved adapter attached and loaded, as --init_adapter does.
inline std::unique_ptr<CausalLM> preference_model_with_peft_adapter() {
  auto model = std::make_unique<CausalLM>(load_model_config(preference_objective_dir("base")), at::kFloat, at::kCPU);
  load_weights(*model, preference_objective_dir("base"));
  attach_lora(*model, read_adapter_config(preference_objective_dir("adapter")), /*random_state=*/0);
  load_adapter_weights(*model, preference_objective_dir("adapter"));
  return model;
}

// The chosen rows, then the rejected rows (the preference objectives' micro-batch contract).
inline HostBatch preference_pairs_batch() {
  const nlohmann::json rows = reference::load_json_fixture("preference", "objective/rows.json");
  std::vector<Sample> samples;
  for (const char* side : {"chosen", "rejected"}) {
    for (const auto& row : rows[side]) {
      samples.push_back({row["input_ids"].get<std::vector<int32_t>>(), row["labels"].get<std::vector<int32_t>>()});
    }
  }
  std::vector<int64_t> order(samples.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  return collate(samples, order, /*pad_token_id=*/0);
}

}  // namespace finetune::testing
