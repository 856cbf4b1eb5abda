// The logits processors and the sampler against transformers 5.17 on fixed scores. Expected values
// were printed by transformers' own classes (RepetitionPenaltyLogitsProcessor(1.3),
// TemperatureLogitsWarper(0.7), TopKLogitsWarper(3), TopPLogitsWarper(0.8); "all" chains them
// with top_k 5 and top_p 0.9) on the same scores, and the draws by torch.manual_seed(7) then six
// torch.multinomial(softmax(all), 1): the comparisons are exact.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "finetune/generate/logits_processors.h"
#include "finetune/generate/sampler.h"

namespace finetune {
namespace {

constexpr float INF = std::numeric_limits<float>::infinity();

at::Tensor scores() {
  return at::tensor({1.5f, -0.5f, 2.0f, 0.25f, -2.0f, 3.0f, 0.0f, 1.0f,  //
                     -1.0f, 0.5f, 0.5f, 4.0f, -3.0f, 2.5f, 1.25f, -0.75f})
      .view({2, 8});
}
at::Tensor sequences() { return at::tensor({0, 1, 5, 4, 4, 3}, at::kLong).view({2, 3}); }
at::Tensor expected(std::vector<float> values) { return at::tensor(values).view({2, 8}); }

TEST(LogitsProcessors, RepetitionPenaltyAsTransformers) {
  const auto want = expected({1.1538461446762085f, -0.6499999761581421f, 2.0f, 0.25f, -2.0f, 2.307692289352417f, 0.0f,
                              1.0f, -1.0f, 0.5f, 0.5f, 3.076923131942749f, -3.8999998569488525f, 2.5f, 1.25f, -0.75f});
  EXPECT_TRUE(at::equal(apply_repetition_penalty(scores(), sequences(), 1.3), want));
}

TEST(LogitsProcessors, TemperatureAsTransformers) {
  const auto want = expected({2.142857074737549f, -0.7142857313156128f, 2.857142925262451f, 0.3571428656578064f,
                              -2.857142925262451f, 4.285714149475098f, 0.0f, 1.4285714626312256f,
                              -1.4285714626312256f, 0.7142857313156128f, 0.7142857313156128f, 5.714285850524902f,
                              -4.285714149475098f, 3.5714285373687744f, 1.7857142686843872f, -1.0714285373687744f});
  EXPECT_TRUE(at::equal(apply_temperature(scores(), 0.7), want));
}

TEST(LogitsProcessors, TopKAndTopPAsTransformers) {
  EXPECT_TRUE(at::equal(apply_top_k(scores(), 3), expected({1.5f, -INF, 2.0f, -INF, -INF, 3.0f, -INF, -INF,  //
                                                             -INF, -INF, -INF, 4.0f, -INF, 2.5f, 1.25f, -INF})));
  EXPECT_TRUE(at::equal(apply_top_p(scores(), 0.8), expected({1.5f, -INF, 2.0f, -INF, -INF, 3.0f, -INF, -INF,  //
                                                               -INF, -INF, -INF, 4.0f, -INF, 2.5f, -INF, -INF})));
  // top_k beyond the vocabulary keeps everything, as transformers' min(top_k, V).
  EXPECT_TRUE(at::equal(apply_top_k(scores(), 100), scores()));
}

at::Tensor all_processed() {
  GenerationConfig config;
  config.repetition_penalty = 1.3;
  config.temperature = 0.7;
  config.top_k = 5;
  config.top_p = 0.9;
  return process_logits(scores(), sequences(), config);
}

TEST(LogitsProcessors, ChainedInTransformersOrder) {
  const auto want = expected({1.6483516693115234f, -INF, 2.857142925262451f, -INF, -INF, 3.296703338623047f, -INF,
                              1.4285714626312256f, -INF, -INF, -INF, 4.395604610443115f, -INF, 3.5714285373687744f,
                              -INF, -INF});
  EXPECT_TRUE(at::equal(all_processed(), want));
  // Greedy: only the repetition penalty applies, as in transformers.
  GenerationConfig greedy;
  greedy.repetition_penalty = 1.3;
  EXPECT_TRUE(at::equal(process_logits(scores(), sequences(), greedy),
                        apply_repetition_penalty(scores(), sequences(), 1.3)));
}

TEST(TokenSampler, DrawsAsTorchManualSeedThenMultinomial) {
  GenerationConfig config;
  config.temperature = 0.7;
  config.seed = 7;
  TokenSampler sampler(config, at::kCPU);
  const std::vector<std::vector<int64_t>> want = {{0, 3}, {0, 3}, {5, 5}, {2, 3}, {5, 5}, {5, 3}};
  const auto processed = all_processed();
  for (size_t step = 0; step < want.size(); ++step) {
    const auto got = sampler.next_tokens(processed);
    EXPECT_EQ(got[0].item<int64_t>(), want[step][0]) << "step " << step;
    EXPECT_EQ(got[1].item<int64_t>(), want[step][1]) << "step " << step;
  }
  GenerationConfig greedy;
  EXPECT_TRUE(at::equal(TokenSampler(greedy, at::kCPU).next_tokens(scores()), at::tensor({5, 3}, at::kLong)));
}

}  // namespace
}  // namespace finetune
