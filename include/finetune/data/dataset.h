// Dataset files -> tokenized samples.
// Formats are detected per file from the first row's keys:
//   alpaca         {"instruction", "input", "output"}   Unsloth CLI's alpaca prompt, EOS appended
//   messages       {"messages": [{"role", "content"}]}   rendered with the chat template
//   sharegpt       {"conversations": [{"from", "value"}]}
//   text           {"text"}
//   pre-tokenized  {"input_ids": [...], "labels": [...]?}  (labels default to input_ids)
// Files are a JSON array (.json) or one object per line (.jsonl). A malformed row is an error
// naming file and line, or with skip_bad_rows a warning and a count. With train_on_completions
// the prompt / non-assistant tokens get label -100. Rows are truncated to max_seq_length; rows
// left with no trainable token are skipped and counted.
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
  ChatFormat chat_format = ChatFormat::ChatMl;
  bool train_on_completions = true;
  bool skip_bad_rows = false;
};

struct DatasetStats {
  int64_t rows_read = 0;
  int64_t rows_kept = 0;
  int64_t rows_bad = 0;          // malformed rows skipped under skip_bad_rows
  int64_t rows_no_trainable = 0; // skipped: nothing left to train on
  int64_t rows_truncated = 0;
  int64_t tokens = 0;            // input tokens kept
  int64_t trainable_tokens = 0;
};

struct TokenizedDataset {
  std::vector<Sample> samples;
  DatasetStats stats;
};

// `tokenizer` may be null only when every file is pre-tokenized.
TokenizedDataset load_dataset(const std::vector<std::string>& files, const Tokenizer* tokenizer,
                              const DatasetOptions& options);

}  // namespace finetune
