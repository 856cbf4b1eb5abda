// Note [Ranks agree before the first step]: the verdict every rank computes from all ranks' lists.
#include <gtest/gtest.h>

#include "../test_support.h"
#include "finetune/ddp/rank_settings.h"

namespace finetune {
namespace {

const std::vector<RankSetting> kRun = {{"--model_name", "sha256:ab12"}, {"--learning_rate", "0.0002"}, {"--seed", "3407"}};

TEST(RankSettings, EqualListsAgree) {
  EXPECT_FALSE(first_rank_disagreement({kRun, kRun, kRun}));
  EXPECT_FALSE(first_rank_disagreement({kRun}));
  EXPECT_FALSE(first_rank_disagreement({}));
  auto reordered = kRun;
  std::swap(reordered[0], reordered[2]);
  EXPECT_FALSE(first_rank_disagreement({kRun, reordered}));  // compared by name
}

TEST(RankSettings, FirstDifferenceInRankZerosOrderIsNamedWithBothValues) {
  auto rank2 = kRun;
  rank2[1].value = "0.001";
  rank2[2].value = "1";
  const auto message = first_rank_disagreement({kRun, kRun, rank2});
  ASSERT_TRUE(message);
  testing::expect_contains(*message, {"different --learning_rate", "rank 0 has '0.0002'", "rank 2 has '0.001'"});
  EXPECT_EQ(message->find("--seed"), std::string::npos);
}

TEST(RankSettings, ASettingOneRankLacksIsADifference) {
  auto fewer = kRun;
  fewer.pop_back();
  testing::expect_contains(first_rank_disagreement({kRun, fewer}).value_or(""),
                           {"--seed", "rank 0 has '3407'", "rank 1 has nothing"});
  auto more = kRun;
  more.push_back({"--packing", "true"});
  testing::expect_contains(first_rank_disagreement({kRun, more}).value_or(""),
                           {"--packing", "rank 0 has nothing", "rank 1 has 'true'"});
}

TEST(RankSettings, LongValuesAreCut) {
  auto long_value = kRun;
  long_value[0].value = std::string(5000, 'x');
  const auto message = first_rank_disagreement({kRun, long_value}).value_or("");
  EXPECT_LT(message.size(), 600u);
  EXPECT_NE(message.find("..."), std::string::npos);
}

}  // namespace
}  // namespace finetune
