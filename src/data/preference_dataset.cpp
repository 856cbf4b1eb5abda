// Preference dataset files -> pairs (see preference_dataset.h).
#include "finetune/data/preference_dataset.h"

#include "finetune/data/dataset_files.h"
#include "finetune/data/orpo_rows.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

constexpr int64_t kBadRowsLogged = 10;

// The first row decides whether the file holds preference rows at all.
void check_preference_file(const DatasetRow& row) {
  if (!row.parse_error.empty() || !row.value.is_object()) return;  // reported as the row's own error
  std::vector<std::string> keys;
  for (auto it = row.value.begin(); it != row.value.end(); ++it) keys.push_back(it.key());
  for (const char* field : {"chosen", "rejected"}) {
    if (!row.value.contains(field)) {
      throw Error(row.location.file + ": not a preference dataset: its first row has no field \"" + field +
                  "\" (keys {" + join(keys, ", ") + "}); preference rows are {\"prompt\", \"chosen\", \"rejected\"} " +
                  "or {\"chosen\", \"rejected\"}, as strings or message lists");
    }
  }
}

PreferencePair pair_of_row(const nlohmann::ordered_json& row, const Tokenizer& tokenizer,
                           const PreferenceDatasetOptions& options, int64_t group_id, bool& dropped) {
  dropped = false;
  if (options.kind == PreferenceRowsKind::Orpo) {
    return orpo_pair(row, options.chat_template, tokenizer, options.orpo_max_length, group_id);
  }
  const PreferenceExample example = preference_example(row);
  const auto tokens = tokenize_preference(example, row, options.chat_template, tokenizer);
  auto pair = preference_pair(tokens, options.truncation, group_id);
  if (!pair) {
    dropped = true;
    return {};
  }
  return std::move(*pair);
}

bool row_is_conversational(const nlohmann::ordered_json& row) {
  return row.is_object() && row.contains("chosen") && row["chosen"].is_array();
}

void count_pair(DatasetStats& stats, const PreferencePair& pair) {
  ++stats.rows_kept;
  for (const Sample* row : {&pair.chosen, &pair.rejected}) {
    stats.tokens += static_cast<int64_t>(row->input_ids.size());
    stats.trainable_tokens += trainable_token_count(*row);
  }
}

}  // namespace

PreferenceDataset load_preference_dataset(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                                          const PreferenceDatasetOptions& options) {
  PreferenceDataset dataset;
  for (const std::string& file : files) {
    bool first = true;
    for_each_dataset_row(file, [&](const DatasetRow& row) {
      if (first) check_preference_file(row);
      first = false;
      ++dataset.stats.rows_read;
      try {
        if (!row.parse_error.empty()) throw Error("invalid JSON: " + row.parse_error);
        bool dropped = false;
        auto pair = pair_of_row(row.value, tokenizer, options, static_cast<int64_t>(dataset.pairs.size()), dropped);
        if (dropped) {
          ++dataset.stats.rows_no_trainable;
          return;
        }
        if (row_is_conversational(row.value)) ++dataset.conversational_rows;
        count_pair(dataset.stats, pair);
        dataset.pairs.push_back(std::move(pair));
      } catch (const UsageError&) {
        throw;
      } catch (const std::exception& error) {
        const std::string message = row.location.describe() + ": " + error.what();
        if (!options.skip_bad_rows) throw Error(message);
        if (dataset.stats.rows_bad++ < kBadRowsLogged) log::warn("skipped " + message);
      }
    });
  }
  dataset.stats.templated_rows = dataset.conversational_rows;
  return dataset;
}

std::vector<Sample> interleaved_pair_rows(const std::vector<PreferencePair>& pairs) {
  std::vector<Sample> rows;
  rows.reserve(2 * pairs.size());
  for (const auto& pair : pairs) {
    rows.push_back(pair.chosen);
    rows.push_back(pair.rejected);
  }
  return rows;
}

}  // namespace finetune
