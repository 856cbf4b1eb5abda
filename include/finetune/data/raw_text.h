// Raw text files as Unsloth CLI's --raw_text_file reads them (unsloth/dataprep/raw_text.py,
// RawTextDataLoader): the file's text is tokenized once without special tokens and cut into
// windows of chunk_size tokens, each starting chunk_size - stride tokens after the previous one
// (consecutive chunks overlap by `stride` tokens); EOS ends the last chunk and counts toward its
// chunk_size (unsloth 2026.10.9, the version the tests compare with). Labels equal input_ids.
//   .json / .jsonl  rows' text from the first string field among text, content, message, body,
//                   description, prompt; rows joined with "\n\n" (.json: one JSON document, a
//                   list of rows or one row; if it does not parse, JSON Lines)
//   anything else   the file's text
// A UTF-8 byte order mark is dropped and line ends are read as Python's text mode reads them.
// .csv files are refused (Unsloth reads their text column; convert them to JSON Lines).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "finetune/data/sample.h"
#include "finetune/tokenizer/tokenizer.h"

namespace finetune {

struct RawTextOptions {
  int64_t chunk_size = 2048;
  int64_t stride = 512;
};

// The file's text as above. Throws Error naming the file when it cannot be read or holds only
// whitespace.
std::string read_raw_text(const std::string& path);

// Chunks of `text` (see above). Throws UsageError unless 0 <= stride < chunk_size.
std::vector<Sample> chunk_raw_text(const std::string& text, const Tokenizer& tokenizer, const RawTextOptions& options);

}  // namespace finetune
