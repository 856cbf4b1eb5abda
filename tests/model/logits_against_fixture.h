// fp32 logits of a model against a transformers fixture (make_*_fixtures.py's input_ids and logits).
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "../reference/tensor_fixtures.h"
#include "finetune/model/causal_lm.h"

namespace finetune::testing {

// The model's logits over the fixture's input_ids (full positions, no mask) against its logits:
// the same shape, and a relative error (Frobenius) of at most 1e-5, printed under `name`.
inline void expect_logits_match(const CausalLM& model, const reference::TensorFixture& expected,
                                const std::string& name) {
  const auto& input_ids = expected["input_ids"];  // (B, T)
  const auto position_ids = at::arange(input_ids.size(1), at::kLong).unsqueeze(0).expand_as(input_ids).contiguous();
  at::NoGradGuard no_grad;
  const auto logits = model.lm_head(model.forward_hidden(input_ids, position_ids, AttentionMask{}, ForwardOptions{}));
  const auto& reference_logits = expected["logits"];
  ASSERT_TRUE(logits.sizes().equals(reference_logits.sizes()));
  const double relative =
      ((logits.to(at::kDouble) - reference_logits.to(at::kDouble)).norm() / reference_logits.to(at::kDouble).norm())
          .item<double>();
  std::printf("  %s: fp32 logits relative to transformers %.3g\n", name.c_str(), relative);
  EXPECT_LE(relative, 1e-5);
}

}  // namespace finetune::testing
