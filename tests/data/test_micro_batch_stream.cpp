// MicroBatchStream: the rank's optimizer steps, packed or not, planned literally or balanced, and
// resuming.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "finetune/data/micro_batch_stream.h"
#include "finetune/data/rank_assignment.h"
#include "finetune/util/errors.h"

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
// stream yields from that point on, across an epoch boundary, packed or not, planned either way.
TEST(MicroBatchStream, LoadStateContinuesExactlyWhereTheStreamWas) {
  std::vector<Sample> samples;
  for (int i = 0; i < 23; ++i) {
    const int length = 3 + (i * 7) % 11;
    samples.push_back({std::vector<int32_t>(length, i + 1), std::vector<int32_t>(length, i + 1)});
  }
  for (int variant = 0; variant < 4; ++variant) {
    const bool packing = variant % 2 == 1;
    MicroBatchStreamConfig config;
    config.planning = variant < 2 ? StepPlanning::literal : StepPlanning::balanced;
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
      resumed.load_state(original.state());
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
// padding to a multiple of the world size, rank r takes rows r, r + world, ...): literal planning.
TEST(MicroBatchStreamPacking, RowsAreDealtByTheRankRule) {
  std::vector<Sample> samples;
  for (int32_t i = 0; i < 29; ++i) {
    const int32_t length = 2 + (i * 5) % 17;
    samples.push_back({std::vector<int32_t>(length, i + 1), std::vector<int32_t>(length, i + 1)});
  }
  const auto rows_of = [&](int world, int rank) {
    MicroBatchStreamConfig config;
    config.sampler = {0, world, rank, /*seed=*/3, /*shuffle=*/true, /*drop_last=*/false};
    config.planning = StepPlanning::literal;
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

// The samples of each micro-batch row of `batch` (each sample's tokens are its index + 1).
std::vector<int64_t> samples_in(const HostBatch& batch) {
  std::vector<int64_t> found;
  for (int64_t row = 0; row < batch.rows; ++row) {
    int64_t start = row * batch.seq_len;
    for (int64_t length : batch.sample_lengths[static_cast<size_t>(row)]) {
      found.push_back(batch.input_ids[static_cast<size_t>(start)] - 1);
      start += length;
    }
  }
  return found;
}

// Balanced planning moves a step's items between ranks and micro-batches and nothing else: every
// step holds the samples the literal rule gives it (as a multiset over all ranks: wrap padding may
// repeat one), ranks get equally many micro-batches, and each micro-batch stays within the token
// budget (padding-free: its tokens; padded: rows x longest row).
TEST(MicroBatchStreamPlanning, BalancedStepsHoldTheLiteralStepsSamples) {
  std::vector<Sample> samples;
  for (int32_t i = 0; i < 37; ++i) {
    const int32_t length = 2 + (i * 11) % 29;
    samples.push_back({std::vector<int32_t>(length, i + 1), std::vector<int32_t>(length, i + 1)});
  }
  for (int world : {1, 2, 3}) {
    for (int variant = 0; variant < 16; ++variant) {
      MicroBatchStreamConfig config;
      config.sampler = {0, world, 0, /*seed=*/9, /*shuffle=*/true, /*drop_last=*/(variant & 1) != 0};
      config.packing = (variant & 2) != 0;
      config.group_by_length = (variant & 4) != 0;
      config.padding_free = (variant & 8) != 0;
      config.batch_size = 2;
      config.gradient_accumulation_steps = 3;
      config.max_seq_length = 32;
      SCOPED_TRACE("world " + std::to_string(world) + " variant " + std::to_string(variant));
      std::vector<MicroBatchStream> literal, balanced;
      for (int rank = 0; rank < world; ++rank) {
        config.sampler.rank = rank;
        config.planning = StepPlanning::literal;
        literal.emplace_back(samples, config);
        config.planning = StepPlanning::balanced;
        balanced.emplace_back(samples, config);
      }
      const int64_t budget = config.batch_size * config.max_seq_length;
      for (int64_t step = 0; step < 2 * literal[0].steps_per_epoch() + 1; ++step) {
        std::map<int64_t, int> want, got;
        size_t micro_batches = 0;
        for (int rank = 0; rank < world; ++rank) {
          for (const auto& batch : literal[static_cast<size_t>(rank)].next_step()) {
            for (int64_t sample : samples_in(batch)) ++want[sample];
          }
          const auto planned = balanced[static_cast<size_t>(rank)].next_step();
          if (rank == 0) micro_batches = planned.size();
          EXPECT_EQ(planned.size(), micro_batches) << "step " << step << ": ranks agree on the micro-batches";
          for (const auto& batch : planned) {
            for (int64_t sample : samples_in(batch)) ++got[sample];
            EXPECT_LE(config.padding_free ? batch.real_tokens : batch.rows * batch.seq_len, budget);
          }
        }
        ASSERT_EQ(got, want) << "step " << step;
        EXPECT_EQ(balanced[0].state().steps_into_epoch, literal[0].state().steps_into_epoch);
      }
    }
  }
}

// At the seed setting (batch 1, accumulation 4) balanced planning gives each rank its share of a
// step's samples as one padding-free micro-batch when they fit the budget, and pads the ranks
// that need fewer micro-batches with empty ones.
TEST(MicroBatchStreamPlanning, SeedSettingBecomesOneMicroBatchPerRank) {
  std::vector<Sample> samples;
  for (int32_t i = 0; i < 16; ++i) {
    const int32_t length = 20 + (i * 37) % 90;
    samples.push_back({std::vector<int32_t>(length, i + 1), std::vector<int32_t>(length, i + 1)});
  }
  MicroBatchStreamConfig config;
  config.sampler = {0, 2, 0, /*seed=*/1, /*shuffle=*/true, /*drop_last=*/false};
  config.gradient_accumulation_steps = 4;
  config.max_seq_length = 512;
  config.padding_free = true;
  for (int rank = 0; rank < 2; ++rank) {
    config.sampler.rank = rank;
    MicroBatchStream stream(samples, config);
    const auto step = stream.next_step();
    ASSERT_EQ(step.size(), 1u);
    EXPECT_EQ(step[0].rows, 4);
  }
  config.max_seq_length = 110;  // now no two of the longer samples share a micro-batch
  std::vector<size_t> counts;
  for (int rank = 0; rank < 2; ++rank) {
    config.sampler.rank = rank;
    MicroBatchStream stream(samples, config);
    const auto step = stream.next_step();
    counts.push_back(step.size());
    EXPECT_EQ(step.front().rows > 0, true) << "empty micro-batches come last";
  }
  EXPECT_EQ(counts[0], counts[1]);
}

}  // namespace
}  // namespace finetune

namespace finetune {
namespace {

// Pairs (group size 2) in micro-batches of 2 samples, 2 per step, up to 16 tokens, seed 4.
MicroBatchStreamConfig pair_stream_config(int world, int rank, StepPlanning planning, bool padding_free) {
  MicroBatchStreamConfig config;
  config.sampler = {0, world, rank, /*seed=*/4, /*shuffle=*/true, /*drop_last=*/false};
  config.batch_size = 2;
  config.gradient_accumulation_steps = 2;
  config.max_seq_length = 16;
  config.group_size = 2;
  config.planning = planning;
  config.padding_free = padding_free;
  return config;
}

// Preference pairs (group_size 2): every micro-batch, literal or balanced, on one rank or three,
// holds whole pairs, laid out as its pairs' chosen rows then their rejected rows in the same order.
TEST(MicroBatchStreamPairs, PairsStayTogetherChosenRowsFirst) {
  std::vector<Sample> samples;  // pair p: chosen tokens 2p + 1, rejected tokens 2p + 2
  for (int32_t p = 0; p < 23; ++p) {
    for (int32_t member = 0; member < 2; ++member) {
      const int32_t length = 2 + (p * 7 + member * 5) % 13;
      const int32_t token = 2 * p + member + 1;
      samples.push_back({std::vector<int32_t>(length, token), std::vector<int32_t>(length, token)});
    }
  }
  for (int world : {1, 3}) {
    for (StepPlanning planning : {StepPlanning::literal, StepPlanning::balanced}) {
      for (bool padding_free : {false, true}) {
        MicroBatchStreamConfig config = pair_stream_config(world, 0, planning, padding_free);
        std::vector<MicroBatchStream> streams;
        for (int rank = 0; rank < world; ++rank) {
          config.sampler.rank = rank;
          streams.emplace_back(samples, config);
        }
        std::map<int32_t, int> pairs_seen;
        for (int64_t step = 0; step < streams[0].steps_per_epoch(); ++step) {
          for (auto& stream : streams) {
            for (const HostBatch& batch : stream.next_step()) {
              if (batch.rows == 0) continue;
              ASSERT_EQ(batch.rows % 2, 0);
              const int64_t pairs = batch.rows / 2;
              for (int64_t i = 0; i < pairs; ++i) {
                const int64_t chosen = batch.input_ids[static_cast<size_t>(i * batch.seq_len)];
                const int64_t rejected = batch.input_ids[static_cast<size_t>((pairs + i) * batch.seq_len)];
                EXPECT_EQ(chosen % 2, 1) << "chosen rows first";
                EXPECT_EQ(rejected, chosen + 1) << "the rejected row of the same pair, in the same order";
                ++pairs_seen[static_cast<int32_t>(chosen / 2)];
              }
            }
          }
        }
        EXPECT_EQ(pairs_seen.size(), 23u) << "every pair in the epoch";
      }
    }
  }
}

// Note [Capture ahead] (train/micro_step_graphs.h) for the preference commands: the trainer reads
// the coming steps' pair micro-batches to capture their graphs, then loads the state it saved;
// the steps it then reads are the ones an uninterrupted stream gives, group ids (the pairs'
// indices, which precomputed reference log-probs are read by) included.
TEST(MicroBatchStreamPairs, ReadingAheadThenLoadingTheStateGivesTheSameSteps) {
  std::vector<Sample> samples;
  for (int32_t p = 0; p < 23; ++p) {
    for (int32_t member = 0; member < 2; ++member) {
      const int32_t length = 2 + (p * 7 + member * 5) % 13;
      samples.push_back({std::vector<int32_t>(length, 2 * p + member + 1), std::vector<int32_t>(length, 1)});
    }
  }
  for (StepPlanning planning : {StepPlanning::literal, StepPlanning::balanced}) {
    const MicroBatchStreamConfig config = pair_stream_config(2, 1, planning, /*padding_free=*/true);
    MicroBatchStream uninterrupted(samples, config);
    MicroBatchStream read_ahead(samples, config);
    const int64_t total = 3 * uninterrupted.steps_per_epoch();
    for (int64_t step = 0; step < total; ++step) {
      if (step == 1) {  // after the warm-up, the coming steps (across epoch boundaries)
        const MicroBatchStreamState position = read_ahead.state();
        for (int64_t coming = 0; coming < total; ++coming) read_ahead.next_step();
        read_ahead.load_state(position);
      }
      const auto want = uninterrupted.next_step();
      const auto got = read_ahead.next_step();
      ASSERT_EQ(got.size(), want.size()) << "step " << step;
      for (size_t m = 0; m < want.size(); ++m) {
        ASSERT_EQ(got[m].input_ids, want[m].input_ids) << "step " << step << " micro-batch " << m;
        ASSERT_EQ(got[m].labels, want[m].labels) << "step " << step << " micro-batch " << m;
        ASSERT_EQ(got[m].group_ids, want[m].group_ids) << "step " << step << " micro-batch " << m;
        ASSERT_EQ(got[m].sample_lengths, want[m].sample_lengths) << "step " << step << " micro-batch " << m;
      }
    }
  }
}

TEST(MicroBatchStreamPairs, RowsThatDoNotFormPairsAreAnError) {
  std::vector<Sample> samples(3, Sample{{1, 2}, {1, 2}});
  MicroBatchStreamConfig config;
  config.group_size = 2;
  EXPECT_THROW(MicroBatchStream(samples, config), Error);
}

}  // namespace
}  // namespace finetune
