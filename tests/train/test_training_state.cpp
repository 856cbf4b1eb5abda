// The data position and the data identity a checkpoint keeps (train/training_state.h).
#include <gtest/gtest.h>

#include "finetune/train/training_state.h"
#include "trainer_test_model.h"

namespace finetune {
namespace {

MicroBatchStreamConfig stream_config() {
  MicroBatchStreamConfig config;
  config.sampler.seed = 5;
  config.batch_size = 2;
  config.gradient_accumulation_steps = 2;
  return config;
}

TEST(DataPosition, SeekingToAStreamsPositionContinuesItsSteps) {
  const auto samples = testing::tiny_samples(10);
  MicroBatchStream stream(samples, stream_config());
  for (int i = 0; i < 4; ++i) stream.next_step();
  const DataPosition position = stream.state();
  EXPECT_EQ(position.epoch, 1);
  EXPECT_EQ(position.steps_into_epoch, 1);
  MicroBatchStream resumed(samples, stream_config());
  resumed.load_state(position);
  const auto want = stream.next_step(), got = resumed.next_step();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].input_ids, want[i].input_ids);
}

TEST(TrainingState, SamplesFingerprintSeesEveryTokenAndLabel) {
  const std::vector<Sample> samples = {{{1, 2, 3}, {-100, 2, 3}}, {{4, 5}, {4, 5}}};
  const auto fingerprint = samples_fingerprint(samples);
  EXPECT_EQ(fingerprint.size(), 16u);
  EXPECT_EQ(samples_fingerprint(samples), fingerprint);
  auto changed = samples;
  changed[1].input_ids[1] = 6;
  EXPECT_NE(samples_fingerprint(changed), fingerprint);
  changed = samples;
  changed[0].labels[1] = -100;
  EXPECT_NE(samples_fingerprint(changed), fingerprint);
  EXPECT_NE(samples_fingerprint({samples[1], samples[0]}), fingerprint);
  EXPECT_NE(samples_fingerprint({{{1, 2}, {-100, 2}}, {{3, 4, 5}, {3, 4, 5}}}), fingerprint);  // other boundaries
}

}  // namespace
}  // namespace finetune
