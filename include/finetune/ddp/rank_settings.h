// Note [Ranks agree before the first step]
// Every rank of a job is started with its own command line and environment, and nothing forces
// them to be equal: a rank given another learning rate, seed or dataset would train a different
// model into the same gradient all-reduce without any error, and one given another --max_steps
// would wait at the end for collectives its peers never issue. Before the first collective of
// training each rank therefore publishes the settings that must match (an ordered list of
// name = value, each value comparing by meaning: a path by the content it names, not its text)
// through the rendezvous store, reads every rank's, and every rank reaches the same verdict: the
// first setting on which some rank differs from rank 0 is an error naming the setting and the
// values, raised by all ranks within the store's wait (seconds), not a timeout.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "finetune/ddp/communicator.h"

namespace finetune {

struct RankSetting {
  std::string name;   // the option, as the user wrote it: "--learning_rate"
  std::string value;  // what must be equal on every rank
};

// Pure: the first setting (in rank 0's order) on which a rank's list differs from rank 0's: a
// different value, or a setting one side lacks. nullopt when all ranks agree.
std::optional<std::string> first_rank_disagreement(const std::vector<std::vector<RankSetting>>& settings_by_rank);

// Publishes this rank's `settings`, reads every rank's and throws UsageError on the first
// disagreement (every rank throws the same message). A world of one returns at once.
void check_ranks_agree(Communicator& communicator, const std::vector<RankSetting>& settings);

}  // namespace finetune
