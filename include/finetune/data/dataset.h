// Dataset files -> tokenized samples.
// Formats are detected per file from the first row's keys:
//   alpaca         {"instruction", "input", "output"}   Unsloth CLI's alpaca prompt, EOS appended
//   messages       {"messages": [{"role", "content"}]}   rendered with the chat template
//   sharegpt       {"conversations": [{"from", "value"}]}
//   text           {"text"}
//   pre-tokenized  {"input_ids": [...], "labels": [...]?}  (labels default to input_ids)
// (checked in the order input_ids, messages, conversations, instruction+output, text; see
// dataset_formats.h). Files are a JSON array (.json) or one object per line (.jsonl, blank lines
// ignored; see dataset_files.h). A malformed row (invalid JSON, not an object, a missing or
// mistyped field, a conversation the template rejects) is an Error naming file and line (.jsonl)
// or element index (.json); with skip_bad_rows it is counted in rows_bad and logged (the first
// 10, then a total). A first row whose keys name no format stops the load even then.
// Tokenization: each rendered segment is encoded separately and concatenated; the tokenizer's
// post-processor (BOS) runs on the first segment only, and not at all when the rendered text
// already starts with the BOS string (Llama-3 / Mistral templates write it). With
// train_on_completions the prompt / non-assistant tokens get label -100, otherwise labels equal
// input_ids. Pre-tokenized rows keep their labels (default: input_ids) and need no tokenizer.
// Rows are truncated to max_seq_length; rows left with no trainable token (labels[t] != -100 for
// some t >= 1) are skipped and counted.
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
  int64_t vocab_size = 0;  // the model's: pre-tokenized ids must be below it (0: unchecked)
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
