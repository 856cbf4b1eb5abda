// Preference dataset files -> chosen/rejected pairs, tokenized, truncated and masked as TRL 1.16
// prepares them: for DPOTrainer (data/preference_rows.h) or for ORPOTrainer (data/orpo_rows.h).
// Files are read row by row as for SFT (data/dataset_files.h). A preference row is an object with
// "chosen" and "rejected" (strings or message lists) and optionally "prompt" (TRL's explicit
// prompt form; without it, the implicit-prompt form: the prompt is their shared prefix). A file
// whose first row lacks "chosen" or "rejected" is an Error naming the file and the missing field;
// a malformed later row is an Error naming its location (skipped and counted under skip_bad_rows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "finetune/data/chat_template.h"
#include "finetune/data/dataset.h"
#include "finetune/data/preference_rows.h"
#include "finetune/tokenizer/tokenizer.h"

namespace finetune {

enum class PreferenceRowsKind { Dpo, Orpo };

struct PreferenceDatasetOptions {
  PreferenceRowsKind kind = PreferenceRowsKind::Dpo;
  PreferenceTruncation truncation;              // dpo: max_length and truncation_mode
  int64_t orpo_max_length = 1024;               // orpo: only completions are cut (data/orpo_rows.h)
  const ChatTemplate* chat_template = nullptr;  // for conversational rows (not owned)
  bool skip_bad_rows = false;
};

struct PreferenceDataset {
  std::vector<PreferencePair> pairs;  // group_id: the pair's index in `pairs`
  DatasetStats stats;                 // rows_no_trainable: pairs dropped by keep_start truncation
  int64_t conversational_rows = 0;
};

PreferenceDataset load_preference_dataset(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                                          const PreferenceDatasetOptions& options);

// The rows the stream deals as pairs (data/micro_batch_stream.h, group_size 2): pair i's chosen row
// at 2i, its rejected row at 2i + 1.
std::vector<Sample> interleaved_pair_rows(const std::vector<PreferencePair>& pairs);

}  // namespace finetune
