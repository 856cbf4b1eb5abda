// NEFTune's embedding noise (model/embedding_noise.h): transformers' magnitude in float32, the
// noise of a fresh generator seeded per forward (on the CPU: a CPUGeneratorImpl with that seed,
// which is what torch.manual_seed gives Python; tests/e2e/test_neftune_parity.py checks the whole run
// against transformers' hook), the seed rule's values (pinned from Python), and forward_hidden
// adding it only when training. On a CUDA device (when there is one): noise present, within the
// magnitude, deterministic per seed, uniform's mean and variance.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include "../lora/adapter_step_gradients.h"
#include "../model/tiny_config.h"
#include "finetune/model/causal_lm.h"
#include "finetune/model/embedding_noise.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

TEST(EmbeddingNoise, MagnitudeIsTransformersFloat32Value) {
  // torch.sqrt(torch.tensor(L * C)) is float32; alpha / t is t.reciprocal() * alpha, in float32.
  for (const auto& [alpha, length, hidden] : {std::tuple{5.0, 7, 64}, std::tuple{0.1, 1, 3}, std::tuple{15.0, 2048, 4096}}) {
    const float expected = (1.0f / std::sqrt(static_cast<float>(length * hidden))) * static_cast<float>(alpha);
    EXPECT_EQ(embedding_noise_magnitude(alpha, length, hidden), static_cast<double>(expected));
  }
}

TEST(EmbeddingNoise, CpuNoiseIsASeededGeneratorsUniformDraw) {
  const auto embedded = at::arange(2 * 5 * 8, at::kFloat).view({2, 5, 8}) / 10;  // (B, T, C)
  const EmbeddingNoise noise{5.0, 5, 1234};
  const auto noisy = add_embedding_noise(embedded, noise);
  const double magnitude = embedding_noise_magnitude(5.0, 5, 8);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1234);  // torch.manual_seed(1234)'s state
  const auto expected = embedded + at::zeros_like(embedded).uniform_(-magnitude, magnitude, generator);
  EXPECT_TRUE(at::equal(noisy, expected));
  const auto drawn = noisy - embedded;
  EXPECT_LE(drawn.abs().max().item<double>(), magnitude * (1 + 1e-6));
  EXPECT_GT(drawn.abs().max().item<double>(), magnitude / 2);
  EXPECT_TRUE(at::equal(add_embedding_noise(embedded, noise), noisy));  // a fresh generator every time
  EXPECT_FALSE(at::equal(add_embedding_noise(embedded, {5.0, 5, 1235}), noisy));
  // L is the padded length given, not the tensor's (a padding-free row is (1, N, C)).
  const auto flat = add_embedding_noise(embedded.view({1, 10, 8}), {5.0, 3, 1234}) - embedded.view({1, 10, 8});
  EXPECT_GT(flat.abs().max().item<double>(), magnitude);
  EXPECT_LE(flat.abs().max().item<double>(), embedding_noise_magnitude(5.0, 3, 8) * (1 + 1e-6));
  EXPECT_THROW(add_embedding_noise(embedded, {0.0, 5, 1}), Error);
}

TEST(EmbeddingNoise, SeedRuleValuesAreThePythonReferences) {
  // tests/reference/neftune_reference.py: noise_seed(3407, 1, 0, 0) and (3407, 2, 1, 3).
  EXPECT_EQ(embedding_noise_seed(3407, 1, 0, 0), 5679481974981535195ULL);
  EXPECT_EQ(embedding_noise_seed(3407, 2, 1, 3), 17107933992104096071ULL);
  std::set<uint64_t> seeds;
  for (int64_t step = 1; step <= 4; ++step)
    for (int64_t rank = 0; rank < 3; ++rank)
      for (int64_t micro = 0; micro < 5; ++micro) seeds.insert(embedding_noise_seed(42, step, rank, micro));
  EXPECT_EQ(seeds.size(), 4u * 3u * 5u);
}

TEST(EmbeddingNoise, ForwardAddsItOnlyWhenTraining) {
  CausalLM model(tiny_llama_config({16, 32, 48, 2, 4, 2, 8}), at::kFloat, at::kCPU);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(3);
  randomize_base(model, generator);
  const auto ids = at::tensor({3, 7, 1, 9, 4, 4, 8, 2, 6, 5}, at::kLong).view({2, 5});
  const auto positions = at::arange(5, at::kLong).repeat({2, 1});
  at::NoGradGuard no_grad;
  auto forward = [&](bool training, std::optional<EmbeddingNoise> noise) {
    ForwardOptions options;
    options.training = training;
    options.gradient_checkpointing = false;
    options.embedding_noise = noise;
    return model.forward_hidden(ids, positions, AttentionMask{}, options);
  };
  const auto clean = forward(false, std::nullopt);
  const EmbeddingNoise noise{5.0, 5, 77};
  EXPECT_TRUE(at::equal(forward(false, noise), clean));  // evaluation: no noise
  EXPECT_TRUE(at::equal(forward(true, std::nullopt), clean));
  const auto noisy = forward(true, noise);
  EXPECT_FALSE(at::allclose(noisy, clean));
  EXPECT_TRUE(at::equal(forward(true, noise), noisy));
}

TEST(EmbeddingNoise, CudaNoiseIsPresentBoundedAndUniform) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const auto embedded = at::zeros({4, 256, 512}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA));
  const EmbeddingNoise noise{5.0, 256, 99};
  const auto drawn = add_embedding_noise(embedded, noise).cpu();
  const double magnitude = embedding_noise_magnitude(5.0, 256, 512);
  EXPECT_LE(drawn.abs().max().item<double>(), magnitude * (1 + 1e-6));
  EXPECT_GT(drawn.abs().max().item<double>(), magnitude * 0.99);
  EXPECT_LT(std::abs(drawn.mean().item<double>()), magnitude * 0.01);
  EXPECT_NEAR(drawn.var().item<double>(), magnitude * magnitude / 3, magnitude * magnitude * 0.01);
  EXPECT_TRUE(at::equal(add_embedding_noise(embedded, noise).cpu(), drawn));
  EXPECT_FALSE(at::equal(add_embedding_noise(embedded, {5.0, 256, 100}).cpu(), drawn));
}

}  // namespace
}  // namespace finetune
