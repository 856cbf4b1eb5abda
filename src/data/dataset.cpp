// load_dataset: rows -> samples, truncation, and statistics.
#include "finetune/data/dataset.h"

#include <algorithm>
#include <optional>

#include "finetune/data/dataset_files.h"
#include "finetune/data/dataset_formats.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"

namespace finetune {
namespace {

// Under skip_bad_rows, each skipped row gets a warning up to this many; then one summary line.
constexpr int64_t kMaxBadRowWarnings = 10;

// Index of the first position that counts for the loss (labels[t] != -100, t >= 1); -1 if none.
int64_t first_trainable_position(const Sample& sample) {
  for (size_t t = 1; t < sample.labels.size(); ++t) {
    if (sample.labels[t] != kIgnoreIndex) return static_cast<int64_t>(t);
  }
  return -1;
}

std::string with_thousands(int64_t value) {
  std::string digits = std::to_string(value);
  for (int64_t i = static_cast<int64_t>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<size_t>(i), ",");
  return digits;
}

// Whether the chat template renders `row`: conversations, and prompt/completion message lists.
bool uses_chat_template(RowFormat format, const nlohmann::ordered_json& row) {
  if (format == RowFormat::Messages || format == RowFormat::ShareGpt) return true;
  return format == RowFormat::PromptCompletion && row.contains("prompt") && row["prompt"].is_array();
}

class DatasetLoader {
 public:
  DatasetLoader(const Tokenizer* tokenizer, const DatasetOptions& options) : options_(options) {
    how_.tokenizer = tokenizer;
    how_.chat_template = options.chat_template;
    how_.train_on_completions = options.train_on_completions;
    how_.vocab_size = options.vocab_size;
  }

  void load_file(const std::string& path) {
    std::optional<RowFormat> format;
    const int64_t kept_before = result_.stats.rows_kept;
    for_each_dataset_row(path, [&](const DatasetRow& row) {
      ++result_.stats.rows_read;
      try {
        if (!row.parse_error.empty()) throw Error("invalid JSON: " + row.parse_error);
        if (!row.value.is_object()) throw Error("row must be a JSON object, got " + std::string(row.value.type_name()));
      } catch (const Error& e) {
        return reject_row(row.location, e);
      }
      if (!format) format = detect_file_format(row);
      if (uses_chat_template(*format, row.value)) ++result_.stats.templated_rows;
      try {
        add_sample(result_, tokenize_row(*format, row.value, how_), options_.max_seq_length);
      } catch (const Error& e) {
        reject_row(row.location, e);
      }
    });
    if (!format) throw Error(path + ": dataset file has no usable rows");
    log::info("dataset " + path + ": " + row_format_name(*format) + " format, " +
              std::to_string(result_.stats.rows_kept - kept_before) + " samples kept");
  }

  TokenizedDataset finish() {
    if (result_.stats.rows_bad > kMaxBadRowWarnings) {
      log::warn("skipped " + std::to_string(result_.stats.rows_bad) + " malformed dataset rows in total (only the first " +
                std::to_string(kMaxBadRowWarnings) + " were reported)");
    }
    const std::string dropped = describe_dropped_rows(result_.stats);
    if (!dropped.empty()) log::warn(dropped);
    return std::move(result_);
  }

 private:
  // The first well-formed row decides the file's format; if its keys name none, the file cannot be
  // read at all, so this is an error even under skip_bad_rows.
  RowFormat detect_file_format(const DatasetRow& row) const {
    const std::optional<RowFormat> format = detect_row_format(row.value);
    if (!format) {
      std::string keys;
      for (const auto& item : row.value.items()) keys += (keys.empty() ? "" : ", ") + item.key();
      throw Error(row.location.describe() + ": cannot tell the dataset format from the keys {" + keys +
                  "}; expected messages, conversations (sharegpt), prompt/completion, instruction/input/output "
                  "(alpaca), text, or input_ids (pre-tokenized)");
    }
    if (*format != RowFormat::PreTokenized && how_.tokenizer == nullptr) {
      throw Error(row.location.file + ": " + row_format_name(*format) + " rows need a tokenizer");
    }
    const bool needs_eos = *format == RowFormat::Alpaca || *format == RowFormat::Text ||
                           (*format == RowFormat::PromptCompletion && row.value["prompt"].is_string());
    if (needs_eos && how_.tokenizer->special_tokens().eos_token.value_or("").empty()) {
      throw Error(row.location.file + ": " + row_format_name(*format) +
                  " rows end with EOS, but the tokenizer has no eos_token");
    }
    return *format;
  }

  void reject_row(const RowLocation& location, const Error& error) {
    const std::string message = location.describe() + ": " + error.what();
    if (!options_.skip_bad_rows) throw Error(message);
    ++result_.stats.rows_bad;
    if (result_.stats.rows_bad <= kMaxBadRowWarnings) log::warn("skipping malformed row: " + message);
  }

  const DatasetOptions& options_;
  RowTokenization how_;
  TokenizedDataset result_;
};

}  // namespace

void DatasetStats::add(const DatasetStats& other) {
  rows_read += other.rows_read;
  rows_kept += other.rows_kept;
  rows_bad += other.rows_bad;
  rows_no_trainable += other.rows_no_trainable;
  rows_truncated += other.rows_truncated;
  rows_truncated_away += other.rows_truncated_away;
  longest_dropped_prompt = std::max(longest_dropped_prompt, other.longest_dropped_prompt);
  tokens += other.tokens;
  trainable_tokens += other.trainable_tokens;
  templated_rows += other.templated_rows;
}

std::string describe_dropped_rows(const DatasetStats& stats) {
  std::string text;
  if (stats.rows_truncated_away > 0) {
    text = with_thousands(stats.rows_truncated_away) + " rows lost every trainable token to truncation (longest prompt " +
           with_thousands(stats.longest_dropped_prompt) + " tokens; --max_seq_length " +
           std::to_string(stats.longest_dropped_prompt + 1) + " would keep them)";
  }
  const int64_t empty = stats.rows_no_trainable - stats.rows_truncated_away;
  if (empty > 0) {
    text += (text.empty() ? "" : "; ") + with_thousands(empty) +
            " rows had no trainable token at all (no assistant turn or completion)";
  }
  return text;
}

void add_sample(TokenizedDataset& dataset, Sample sample, int64_t max_seq_length) {
  DatasetStats& stats = dataset.stats;
  const int64_t first_trainable = first_trainable_position(sample);
  if (static_cast<int64_t>(sample.input_ids.size()) > max_seq_length) {
    sample.input_ids.resize(static_cast<size_t>(max_seq_length));
    sample.labels.resize(static_cast<size_t>(max_seq_length));
    ++stats.rows_truncated;
  }
  const int64_t trainable = trainable_token_count(sample);
  if (trainable == 0) {
    ++stats.rows_no_trainable;
    if (first_trainable >= 0) {  // it had some before truncation
      ++stats.rows_truncated_away;
      stats.longest_dropped_prompt = std::max(stats.longest_dropped_prompt, first_trainable);
    }
    return;
  }
  ++stats.rows_kept;
  stats.tokens += static_cast<int64_t>(sample.input_ids.size());
  stats.trainable_tokens += trainable;
  dataset.samples.push_back(std::move(sample));
}

TokenizedDataset load_dataset(const std::vector<std::string>& files, const Tokenizer* tokenizer,
                              const DatasetOptions& options) {
  if (files.empty()) throw UsageError("no dataset files given");
  if (options.max_seq_length < 2) {
    throw UsageError("max_seq_length must be at least 2, got " + std::to_string(options.max_seq_length));
  }
  DatasetLoader loader(tokenizer, options);
  for (const std::string& path : files) loader.load_file(path);
  return loader.finish();
}

}  // namespace finetune
