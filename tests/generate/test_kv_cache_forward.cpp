// Note [KV-cache forward]: a left-padded batch run as a prefill then one token per step through
// the cache gives, at every real position, the hidden states of the plain forward of that row
// alone (the training path, unchanged). fp32 on the CPU agrees to rounding: the attention sums run
// over differently shaped, masked rows (measured 2.3e-7 of the largest value, about 2 fp32 ulps;
// bound 1e-6); the CUDA test checks bf16 within a bf16-sized bound.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include "../lora/adapter_step_gradients.h"
#include "../model/tiny_config.h"
#include "finetune/model/causal_lm.h"
#include "finetune/model/kv_cache.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// The largest |cached - plain| over the real positions, relative to max |plain|. `padded`: rows of
// 7 and 4 tokens (left padding, a mask); else two rows of 7 (no mask: the mask-free kernels).
double cached_vs_plain_error(const CausalLM& model, bool padded = true) {
  c10::InferenceMode inference;
  const auto device = model.device();
  const auto long_options = at::TensorOptions().dtype(at::kLong).device(device);
  const std::vector<std::vector<int64_t>> rows = {{3, 7, 1, 9, 4, 4, 8},
                                                  padded ? std::vector<int64_t>{2, 6, 5, 1}
                                                         : std::vector<int64_t>{2, 6, 5, 1, 8, 8, 3}};
  const int64_t total = 7, prefill = 5;
  // Left-padded batch (pad id 0), mask and transformers' position ids.
  auto ids = at::zeros({2, total}, long_options);
  auto mask = at::zeros({2, total}, long_options);
  for (int64_t row = 0; row < 2; ++row) {
    const int64_t offset = total - static_cast<int64_t>(rows[row].size());
    ids[row].narrow(0, offset, total - offset).copy_(at::tensor(rows[row], at::kLong));
    mask[row].narrow(0, offset, total - offset).fill_(1);
  }
  const auto positions = (mask.cumsum(-1) - 1).masked_fill(mask.eq(0), 0);

  KVCache cache = allocate_kv_cache(model.config(), 2, total, model.dtype(), device);
  auto key_mask = [&](int64_t length) { return padded ? mask.narrow(1, 0, length) : at::Tensor(); };
  std::vector<at::Tensor> cached = {model.forward_cached(ids.narrow(1, 0, prefill), positions.narrow(1, 0, prefill),
                                                         cache, key_mask(prefill))};  // (B, 5, C)
  for (int64_t t = prefill; t < total; ++t) {
    cached.push_back(
        model.forward_cached(ids.narrow(1, t, 1), positions.narrow(1, t, 1), cache, key_mask(t + 1)));  // (B, 1, C)
  }
  EXPECT_EQ(cache.length, total);
  const auto cached_all = at::cat(cached, 1).to(at::kFloat);  // (B, T, C)

  double worst = 0;
  for (int64_t row = 0; row < 2; ++row) {
    const int64_t length = static_cast<int64_t>(rows[row].size());
    const auto plain = model.forward_hidden(at::tensor(rows[row], long_options).unsqueeze(0),
                                            at::arange(length, long_options).unsqueeze(0), AttentionMask{},
                                            ForwardOptions{})
                           .to(at::kFloat)
                           .squeeze(0);  // (L, C)
    const auto got = cached_all[row].narrow(0, total - length, length);
    worst = std::max(worst, ((got - plain).abs().max() / plain.abs().max()).item<double>());
  }
  return worst;
}

CausalLM random_model(bool qk_norm, at::ScalarType dtype, at::Device device) {
  auto config = tiny_llama_config({32, 32, 48, 2, 4, 2, 8});
  config.qk_norm = qk_norm;
  CausalLM model(config, at::kFloat, at::kCPU);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
  randomize_base(model, generator);
  if (dtype == at::kFloat && device.is_cpu()) return model;
  CausalLM moved(config, dtype, device);
  auto source = model.named_parameters();
  auto target = moved.named_parameters();
  for (size_t i = 0; i < source.size(); ++i) target[i].second.copy_(source[i].second);  // same HF order
  return moved;
}

TEST(KVCacheForward, PaddedPrefillAndDecodeGiveThePlainForward) {
  for (bool qk_norm : {false, true}) {
    for (bool padded : {true, false}) {
      EXPECT_LE(cached_vs_plain_error(random_model(qk_norm, at::kFloat, at::kCPU), padded), 1e-6)
          << "qk_norm " << qk_norm << " padded " << padded;
    }
  }
}

TEST(KVCacheForward, RefusesMorePositionsThanTheCacheHolds) {
  const auto model = random_model(false, at::kFloat, at::kCPU);
  c10::InferenceMode inference;
  KVCache cache = allocate_kv_cache(model.config(), 1, 3, at::kFloat, at::kCPU);
  const auto ids = at::zeros({1, 4}, at::kLong);
  EXPECT_THROW(model.forward_cached(ids, ids, cache, at::Tensor()), Error);
}

TEST(KVCacheForward, CudaBf16WithinBound) {
  if (!at::hasCUDA()) GTEST_SKIP() << "needs a CUDA device";
  // bf16 keeps 8 bits of mantissa: the cached and plain forwards round differently through two
  // layers; 3% of the largest hidden value is a few bf16 ulps of it.
  // Both GPU attention paths: the masked math kernel (padded) and flash attention (unpadded).
  const auto model = random_model(true, at::kBFloat16, at::Device(at::kCUDA, 0));
  EXPECT_LE(cached_vs_plain_error(model, /*padded=*/true), 3e-2);
  EXPECT_LE(cached_vs_plain_error(model, /*padded=*/false), 3e-2);
}

}  // namespace
}  // namespace finetune
