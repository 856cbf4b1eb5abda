// forward_backward (train/micro_step.h) back-propagates loss_sum / normaliser (x loss scale) and
// returns the plain loss sum.
#include <gtest/gtest.h>

#include "finetune/data/batch.h"
#include "finetune/train/device_batch.h"
#include "finetune/train/micro_step.h"
#include "trainer_test_model.h"

namespace finetune {
namespace {

using testing::training_forward;

TEST(MicroStep, ForwardBackwardPropagatesTheScaledNormalisedLoss) {
  const HostBatch host = collate(testing::tiny_samples(3), {0, 1, 2}, 0);
  auto grads_of = [&](const at::Tensor& normaliser, const at::Tensor& scale, double* loss) {
    auto model = testing::tiny_lora_model();
    const CausalLmObjective objective(model->config());
    const auto batch = to_device(host, at::kCPU, BatchLayout::kPaddedRows);
    const auto inputs = micro_batch_inputs(batch);
    *loss = forward_backward(*model, inputs, training_forward(), objective, normaliser, scale).item<double>();
    std::vector<at::Tensor> grads;
    for (const auto& [name, tensor] : lora_parameters(*model)) grads.push_back(tensor.grad().clone());
    return grads;
  };
  double loss_a = 0, loss_b = 0;
  const auto a = grads_of(at::scalar_tensor(10.0, at::kFloat), at::Tensor(), &loss_a);
  const auto b = grads_of(at::scalar_tensor(20.0, at::kFloat), at::scalar_tensor(4.0, at::kFloat), &loss_b);
  EXPECT_EQ(loss_a, loss_b);  // the returned loss sum is unscaled and unnormalised
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::allclose(b[i], a[i] * 2.0, 1e-5, 1e-7)) << i;  // x 4 / 2
  }
}

}  // namespace
}  // namespace finetune
