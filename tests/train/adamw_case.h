// The AdamW hyper-parameters of a reference fixture case (make_train_fixtures.py's adamw cases,
// make_adamw8bit_fixtures.py's): beta1, beta2, eps, weight_decay.
#pragma once

#include <nlohmann/json.hpp>

#include "finetune/train/optimizer.h"

namespace finetune::testing {

inline AdamWOptions adamw_options_of(const nlohmann::json& fixture_case) {
  AdamWOptions options;
  options.beta1 = fixture_case.at("beta1");
  options.beta2 = fixture_case.at("beta2");
  options.eps = fixture_case.at("eps");
  options.weight_decay = fixture_case.at("weight_decay");
  return options;
}

}  // namespace finetune::testing
