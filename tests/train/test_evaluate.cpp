// evaluate(): the mean token loss over samples does not depend on the evaluation batch size, counts
// exactly the trainable tokens, and equals the loss computed sample by sample.
#include <gtest/gtest.h>

#include <cmath>

#include "evaluate_test_model.h"
#include "finetune/data/batch.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/evaluate.h"
#include "finetune/train/loss.h"

namespace finetune {
namespace {

using evaluate_test::random_model;
using evaluate_test::samples;

TEST(Evaluate, MeanLossIsIndependentOfTheBatchSize) {
  const auto model = random_model();
  const auto data = samples();
  const std::vector<int64_t> all = {0, 1, 2, 3, 4};
  const EvalResult one = evaluate(*model, data, all, 1, 0);
  int64_t trainable = 0;
  double loss_sum = 0;
  for (int64_t index : all) {
    const auto host = collate(data, {index}, 0);
    trainable += host.trainable_tokens;
    at::NoGradGuard no_grad;
    const auto batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
    auto hidden = model->forward_hidden(batch.input_ids, batch.position_ids, batch.mask, ForwardOptions{});
    loss_sum += causal_lm_loss_sum(*model, hidden, batch.target_positions, batch.target_ids).item<double>();
  }
  EXPECT_EQ(one.tokens, trainable);
  EXPECT_NEAR(one.loss_sum, loss_sum, 1e-12 * loss_sum);
  for (int64_t batch_size : {2, 3, 5, 8}) {
    const EvalResult batched = evaluate(*model, data, all, batch_size, 0);
    EXPECT_EQ(batched.tokens, one.tokens);
    EXPECT_NEAR(batched.mean_loss(), one.mean_loss(), 1e-5 * one.mean_loss()) << "batch " << batch_size;
  }
  EXPECT_DOUBLE_EQ(one.perplexity(), std::exp(one.mean_loss()));
  EXPECT_TRUE(std::isnan(evaluate(*model, data, {}, 1, 0).mean_loss()));
}

}  // namespace
}  // namespace finetune
