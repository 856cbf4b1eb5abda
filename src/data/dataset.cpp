// load_dataset: rows -> segments -> token ids and labels, truncation, and statistics.
#include "finetune/data/dataset.h"


#include <optional>

#include "finetune/data/dataset_files.h"
#include "finetune/data/dataset_formats.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"

namespace finetune {
namespace {

// Under skip_bad_rows, each skipped row gets a warning up to this many; then one summary line.
constexpr int64_t kMaxBadRowWarnings = 10;

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

// Tokenizes the whole rendered text at once, so the ids are exactly what the HF tokenizer gives
// for the templated text (segment-by-segment encoding can differ at boundaries, e.g. SentencePiece's
// prefix space). Which tokens are trained on comes from the token counts of growing prefixes:
// segment k owns the tokens between the encodings of "segments 0..k-1" and "segments 0..k".
// The tokenizer's post-processor (e.g. BOS) runs unless the rendered text already starts with the
// BOS string (Llama-3 and Mistral templates write it themselves, as HF's apply_chat_template does
// before tokenizing without special tokens); the tokens it adds in front belong to the first
// segment, anything it appends to the last.
Sample tokenize_segments(std::vector<TextSegment> segments, const Tokenizer& tokenizer, bool train_on_completions) {
  if (!train_on_completions && segments.size() > 1) {
    std::string whole;
    for (const TextSegment& segment : segments) whole += segment.text;
    segments = {TextSegment{std::move(whole), true}};
  }
  const std::string bos = tokenizer.special_tokens().bos_token.value_or("");
  const bool template_wrote_bos = !bos.empty() && !segments.empty() && starts_with(segments.front().text, bos);
  const bool add_special_tokens = !template_wrote_bos;
  std::string whole;
  for (const TextSegment& segment : segments) whole += segment.text;

  Sample sample;
  sample.input_ids = tokenizer.encode(whole, add_special_tokens);
  sample.labels.assign(sample.input_ids.begin(), sample.input_ids.end());
  if (segments.size() == 1) {
    if (!segments[0].trainable) sample.labels.assign(sample.labels.size(), kIgnoreIndex);
    return sample;
  }
  const size_t total = sample.input_ids.size();
  const size_t added_in_front = add_special_tokens ? total - tokenizer.encode(whole, false).size() : 0;
  std::string prefix;
  size_t begin = 0;
  for (size_t k = 0; k < segments.size(); ++k) {
    prefix += segments[k].text;
    const size_t end = k + 1 == segments.size()
                           ? total
                           : std::min(total, added_in_front + tokenizer.encode(prefix, false).size());
    if (!segments[k].trainable) {
      for (size_t i = begin; i < std::max(begin, end); ++i) sample.labels[i] = kIgnoreIndex;
    }
    begin = std::max(begin, end);
  }
  return sample;
}

class DatasetLoader {
 public:
  DatasetLoader(const Tokenizer* tokenizer, const DatasetOptions& options) : tokenizer_(tokenizer), options_(options) {}

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
      try {
        add_sample(*format == RowFormat::PreTokenized ? pretokenized_row(row.value, options_.vocab_size) : tokenize_row(*format, row.value));
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
                  "}; expected instruction/input/output (alpaca), messages, conversations (sharegpt), text, "
                  "or input_ids (pre-tokenized)");
    }
    if (*format != RowFormat::PreTokenized) require_text_support(*format, row.location);
    return *format;
  }

  void require_text_support(RowFormat format, const RowLocation& location) const {
    if (tokenizer_ == nullptr) {
      throw Error(location.file + ": " + row_format_name(format) + " rows need a tokenizer");
    }
    const bool needs_eos = format == RowFormat::Alpaca || format == RowFormat::Text ||
                           ((format == RowFormat::Messages || format == RowFormat::ShareGpt) &&
                            options_.chat_format == ChatFormat::Mistral);
    if (needs_eos && tokenizer_->special_tokens().eos_token.value_or("").empty()) {
      throw Error(location.file + ": " + row_format_name(format) + " rows end with EOS, but the tokenizer has no eos_token");
    }
  }

  Sample tokenize_row(RowFormat format, const nlohmann::json& value) const {
    const SpecialTokens& special = tokenizer_->special_tokens();
    std::vector<TextSegment> segments = render_row(format, value, options_.chat_format, special.bos_token.value_or(""),
                                                   special.eos_token.value_or(""));
    return tokenize_segments(std::move(segments), *tokenizer_, options_.train_on_completions);
  }

  void add_sample(Sample sample) {
    DatasetStats& stats = result_.stats;
    if (static_cast<int64_t>(sample.input_ids.size()) > options_.max_seq_length) {
      sample.input_ids.resize(static_cast<size_t>(options_.max_seq_length));
      sample.labels.resize(static_cast<size_t>(options_.max_seq_length));
      ++stats.rows_truncated;
    }
    const int64_t trainable = trainable_token_count(sample);
    if (trainable == 0) {
      ++stats.rows_no_trainable;
      return;
    }
    ++stats.rows_kept;
    stats.tokens += static_cast<int64_t>(sample.input_ids.size());
    stats.trainable_tokens += trainable;
    result_.samples.push_back(std::move(sample));
  }

  void reject_row(const RowLocation& location, const Error& error) {
    const std::string message = location.describe() + ": " + error.what();
    if (!options_.skip_bad_rows) throw Error(message);
    ++result_.stats.rows_bad;
    if (result_.stats.rows_bad <= kMaxBadRowWarnings) log::warn("skipping malformed row: " + message);
  }

  const Tokenizer* tokenizer_;
  const DatasetOptions& options_;
  TokenizedDataset result_;
};

}  // namespace

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
