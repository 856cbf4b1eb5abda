// MicroBatchStream: the rank's optimizer steps, packed or not, and resuming.
#include <gtest/gtest.h>

#include <algorithm>

#include "finetune/data/micro_batch_stream.h"
#include "finetune/data/rank_assignment.h"

namespace finetune {
namespace {

// With shuffling, packed rows are visited in a random order, not longest-first; every sample is
// still seen exactly once per epoch, and ranks stay disjoint.
TEST(MicroBatchStreamPacking, ShuffledRowsCoverEverySampleOnceAndAreNotLongestFirst) {
  std::vector<Sample> samples;
  for (int32_t i = 0; i < 40; ++i) {
    const int32_t length = 2 + (i * 7) % 30;
    samples.push_back({std::vector<int32_t>(length, i + 1), std::vector<int32_t>(length, i + 1)});
  }
  std::vector<int64_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    MicroBatchStreamConfig config;
    config.sampler = {0, 2, rank, /*seed=*/5, /*shuffle=*/true, /*drop_last=*/false};
    config.batch_size = 1;
    config.packing = true;
    config.max_seq_length = 40;
    MicroBatchStream stream(samples, config);
    for (int64_t step = 0; step < stream.steps_per_epoch(); ++step) {
      for (const auto& batch : stream.next_step()) {
        for (int64_t row = 0; row < batch.rows; ++row) {  // the first token of every sample
          int64_t start = row * batch.seq_len;
          for (int64_t length : batch.sample_lengths[static_cast<size_t>(row)]) {
            seen.push_back(batch.input_ids[static_cast<size_t>(start)] - 1);
            start += length;
          }
        }
      }
    }
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  EXPECT_EQ(seen.size(), samples.size());
  // Unshuffled best-fit order would start with the row holding the longest sample (31 tokens).
  MicroBatchStreamConfig ordered;
  ordered.sampler = {0, 1, 0, 5, /*shuffle=*/false, false};
  ordered.packing = true;
  ordered.max_seq_length = 40;
  MicroBatchStream unshuffled(samples, ordered);
  const auto first = unshuffled.next_step();
  const auto& first_ids = first.front().input_ids;
  EXPECT_EQ(std::count(first_ids.begin(), first_ids.end(), first_ids.front()), 31);
  MicroBatchStreamConfig shuffled = ordered;
  shuffled.sampler.shuffle = true;
  int epochs_starting_longest_first = 0;
  MicroBatchStream stream(samples, shuffled);
  for (int epoch = 0; epoch < 4; ++epoch) {
    const auto step = stream.next_step();
    const auto& ids = step.front().input_ids;
    epochs_starting_longest_first += std::count(ids.begin(), ids.end(), ids.front()) == 31;
    for (int64_t s = 1; s < stream.steps_per_epoch(); ++s) stream.next_step();
  }
  EXPECT_LT(epochs_starting_longest_first, 4);
}


// Resuming: a stream moved to (epoch, steps into it) yields exactly what the uninterrupted
// stream yields from that point on, across an epoch boundary, packed or not.
TEST(MicroBatchStream, SeekContinuesExactlyWhereTheStreamWas) {
  std::vector<Sample> samples;
  for (int i = 0; i < 23; ++i) {
    const int length = 3 + (i * 7) % 11;
    samples.push_back({std::vector<int32_t>(length, i + 1), std::vector<int32_t>(length, i + 1)});
  }
  for (bool packing : {false, true}) {
    MicroBatchStreamConfig config;
    config.sampler = {0, 2, 1, /*seed=*/5, /*shuffle=*/true, /*drop_last=*/false};
    config.batch_size = 2;
    config.gradient_accumulation_steps = 2;
    config.packing = packing;
    config.max_seq_length = 24;
    MicroBatchStream reference(samples, config);
    const int64_t total = 3 * reference.steps_per_epoch() + 1;
    for (int64_t stop = 0; stop < total; ++stop) {
      MicroBatchStream original(samples, config);
      for (int64_t s = 0; s < stop; ++s) original.next_step();
      MicroBatchStream resumed(samples, config);
      resumed.seek(original.epoch(), original.steps_into_epoch());
      for (int64_t s = stop; s < total; ++s) {
        const auto want = original.next_step();
        const auto got = resumed.next_step();
        ASSERT_EQ(got.size(), want.size()) << "packing " << packing << " stop " << stop << " step " << s;
        for (size_t m = 0; m < want.size(); ++m) {
          ASSERT_EQ(got[m].input_ids, want[m].input_ids) << "packing " << packing << " stop " << stop << " step " << s;
          ASSERT_EQ(got[m].labels, want[m].labels);
        }
      }
    }
  }
}

// Note [One rule for ranks]: packed rows are dealt to ranks as the sampler deals samples (wrap
// padding to a multiple of the world size, rank r takes rows r, r + world, ...).
TEST(MicroBatchStreamPacking, RowsAreDealtByTheRankRule) {
  std::vector<Sample> samples;
  for (int32_t i = 0; i < 29; ++i) {
    const int32_t length = 2 + (i * 5) % 17;
    samples.push_back({std::vector<int32_t>(length, i + 1), std::vector<int32_t>(length, i + 1)});
  }
  const auto rows_of = [&](int world, int rank) {
    MicroBatchStreamConfig config;
    config.sampler = {0, world, rank, /*seed=*/3, /*shuffle=*/true, /*drop_last=*/false};
    config.batch_size = 1;
    config.packing = true;
    config.max_seq_length = 20;
    MicroBatchStream stream(samples, config);
    std::vector<std::vector<int64_t>> rows;
    for (int64_t step = 0; step < stream.steps_per_epoch(); ++step) {
      for (const auto& batch : stream.next_step()) rows.push_back(batch.input_ids);
    }
    return rows;
  };
  const auto global = rows_of(1, 0);
  ASSERT_GT(global.size(), 4u);
  for (int world : {2, 3, 4}) {
    for (int rank = 0; rank < world; ++rank) {
      EXPECT_EQ(rows_of(world, rank), rank_share(global, world, rank, RankPadding::wrap_around))
          << "world " << world << " rank " << rank;
    }
  }
}

}  // namespace
}  // namespace finetune
