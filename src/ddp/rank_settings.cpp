#include "finetune/ddp/rank_settings.h"

#include <nlohmann/json.hpp>

#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

constexpr const char* kKeyPrefix = "rank_settings/";
constexpr const char* kDoneKeyPrefix = "rank_settings_read/";

std::string settings_json(const std::vector<RankSetting>& settings) {
  auto json = nlohmann::json::array();
  for (const auto& setting : settings) json.push_back({setting.name, setting.value});
  return json.dump();
}

std::vector<RankSetting> settings_from_json(const std::string& text, int rank) {
  const auto json = parse_json(text, "rank " + std::to_string(rank) + "'s settings");
  std::vector<RankSetting> settings;
  for (const auto& entry : json) settings.push_back({entry.at(0).get<std::string>(), entry.at(1).get<std::string>()});
  return settings;
}

const RankSetting* find_setting(const std::vector<RankSetting>& settings, const std::string& name) {
  for (const auto& setting : settings) {
    if (setting.name == name) return &setting;
  }
  return nullptr;
}

std::string shown(const RankSetting* setting) {
  if (setting == nullptr) return "nothing";
  constexpr size_t kShown = 200;  // a value is normally short; a long one is cut, not printed whole
  const auto& value = setting->value;
  return "'" + (value.size() > kShown ? value.substr(0, kShown) + "..." : value) + "'";
}

}  // namespace

std::optional<std::string> first_rank_disagreement(const std::vector<std::vector<RankSetting>>& settings_by_rank) {
  if (settings_by_rank.empty()) return std::nullopt;
  const auto& reference = settings_by_rank[0];
  auto names = reference;  // rank 0's order, then any name only another rank has
  for (const auto& settings : settings_by_rank) {
    for (const auto& setting : settings) {
      if (find_setting(names, setting.name) == nullptr) names.push_back(setting);
    }
  }
  for (const auto& [name, unused] : names) {
    const RankSetting* expected = find_setting(reference, name);
    for (size_t rank = 1; rank < settings_by_rank.size(); ++rank) {
      const RankSetting* actual = find_setting(settings_by_rank[rank], name);
      if ((expected == nullptr) != (actual == nullptr) || (expected && expected->value != actual->value)) {
        return "the ranks were started with different " + name + ": rank 0 has " + shown(expected) + ", rank " +
               std::to_string(rank) + " has " + shown(actual) +
               " (every rank must train the same run: give all ranks the same options)";
      }
    }
  }
  return std::nullopt;
}

void check_ranks_agree(Communicator& communicator, const std::vector<RankSetting>& settings) {
  if (communicator.world_size() == 1) return;
  communicator.publish(kKeyPrefix + std::to_string(communicator.rank()), settings_json(settings));
  std::vector<std::vector<RankSetting>> settings_by_rank;
  for (int rank = 0; rank < communicator.world_size(); ++rank) {
    settings_by_rank.push_back(rank == communicator.rank()
                                   ? settings
                                   : settings_from_json(communicator.wait_for(kKeyPrefix + std::to_string(rank),
                                                                              "rank " + std::to_string(rank) +
                                                                                  "'s run settings"),
                                                        rank));
  }
  const auto disagreement = first_rank_disagreement(settings_by_rank);
  if (!disagreement) return;
  // Every rank reached this verdict. Rank 0 may host the store: it leaves last, once every other
  // rank has said it read everything, so no rank's last read meets a vanished store (and a relayed
  // "rank 0 is gone" instead of the verdict).
  if (communicator.rank() != 0) {
    communicator.publish(kDoneKeyPrefix + std::to_string(communicator.rank()), "1");
  } else {
    for (int rank = 1; rank < communicator.world_size(); ++rank) {
      communicator.wait_for(kDoneKeyPrefix + std::to_string(rank), "rank " + std::to_string(rank) + "'s verdict");
    }
  }
  throw UsageError(*disagreement);
}

}  // namespace finetune
