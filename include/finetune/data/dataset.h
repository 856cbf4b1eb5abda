// Dataset files -> tokenized samples.
// Files are read row by row (dataset_files.h: .json, .jsonl; parquet_rows.h: .parquet), each
// file's format is detected from its first row's keys and every row tokenized by that format
// (dataset_formats.h: pre-tokenized, messages, sharegpt, prompt/completion, alpaca, text).
// A malformed row (invalid JSON, not an object, a missing or mistyped field, a conversation the
// template rejects) is an Error naming file and line (JSON Lines) or element/row index; with
// skip_bad_rows it is counted in rows_bad and logged (the first 10, then a total). A first row
// whose keys name no format stops the load even then.
// Rows are truncated to max_seq_length; rows left with no trainable token (labels[t] != -100 for
// some t >= 1) are skipped and counted: those that lost every trainable token to truncation apart
// (with the longest prompt among them and the max_seq_length that would keep them all).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "finetune/data/chat_template.h"
#include "finetune/data/sample.h"
#include "finetune/tokenizer/tokenizer.h"

namespace finetune {

struct DatasetOptions {
  int64_t max_seq_length = 2048;
  const ChatTemplate* chat_template = nullptr;  // for conversational rows (not owned)
  bool train_on_completions = true;             // assistant turns / completions only
  bool skip_bad_rows = false;
  int64_t vocab_size = 0;  // the model's: pre-tokenized ids must be below it (0: unchecked)
};

struct DatasetStats {
  int64_t rows_read = 0;
  int64_t rows_kept = 0;
  int64_t rows_bad = 0;                // malformed rows skipped under skip_bad_rows
  int64_t rows_no_trainable = 0;       // skipped: nothing to train on (truncated away included)
  int64_t rows_truncated = 0;
  int64_t rows_truncated_away = 0;     // of rows_no_trainable: every trainable token was cut off
  int64_t longest_dropped_prompt = 0;  // tokens before the first trainable one, over those rows
  int64_t tokens = 0;                  // input tokens kept
  int64_t trainable_tokens = 0;
  int64_t templated_rows = 0;          // rows read in a format the chat template renders (conversations)

  void add(const DatasetStats& other);
};

// One line on rows dropped for having nothing to train on, e.g. "3 rows lost every trainable
// token to truncation (longest prompt 3,120 tokens; --max_seq_length 3121 would keep them)";
// empty when none were.
std::string describe_dropped_rows(const DatasetStats& stats);

struct TokenizedDataset {
  std::vector<Sample> samples;
  DatasetStats stats;
};

// `tokenizer` may be null only when every file is pre-tokenized.
TokenizedDataset load_dataset(const std::vector<std::string>& files, const Tokenizer* tokenizer,
                              const DatasetOptions& options);

// Truncates to max_seq_length and keeps the sample when something is left to train on,
// updating `stats` (as load_dataset does for every row).
void add_sample(TokenizedDataset& dataset, Sample sample, int64_t max_seq_length);

}  // namespace finetune
