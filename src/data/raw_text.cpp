// Raw text files -> overlapping token chunks (see raw_text.h).
#include "finetune/data/raw_text.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "finetune/util/errors.h"
#include "finetune/util/file_contents.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

using nlohmann::ordered_json;

std::string lowercase_extension(const std::string& path) {
  const size_t dot = path.find_last_of('.');
  const size_t slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string extension = path.substr(dot);
  std::transform(extension.begin(), extension.end(), extension.begin(), [](unsigned char c) { return std::tolower(c); });
  return extension;
}

// Python's text-mode reading: "\r\n" and a lone "\r" become "\n".
std::string universal_newlines(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      out += '\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else {
      out += text[i];
    }
  }
  return out;
}

bool is_blank(const std::string& text) { return text.find_first_not_of(" \t\r\n\f\v") == std::string::npos; }

std::string text_of_row(const ordered_json& row) {
  if (!row.is_object()) return "";
  for (const char* field : {"text", "content", "message", "body", "description", "prompt"}) {
    const auto value = row.find(field);
    if (value != row.end() && value->is_string()) return value->get<std::string>();
  }
  return "";
}

std::string join_rows(const std::vector<ordered_json>& rows) {
  std::string joined;
  bool first = true;
  for (const ordered_json& row : rows) {
    const std::string text = text_of_row(row);
    if (text.empty()) continue;
    if (!first) joined += "\n\n";
    joined += text;
    first = false;
  }
  return joined;
}

std::vector<ordered_json> json_lines(const std::string& text, const std::string& path) {
  std::vector<ordered_json> rows;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (is_blank(line)) continue;
    try {
      rows.push_back(parse_ordered_json(line, path));
    } catch (const JsonSyntaxError&) {
      // Unsloth skips malformed lines.
    }
  }
  return rows;
}

}  // namespace

std::string read_raw_text(const std::string& path) {
  std::string text = read_file(path, "raw text file");
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  text = universal_newlines(text);
  const std::string extension = lowercase_extension(path);
  if (extension == ".csv") {
    throw Error(path + ": CSV raw text files are not supported; convert it to JSON Lines with a \"text\" field");
  }
  if (extension == ".json") {
    std::vector<ordered_json> rows;
    try {
      ordered_json document = parse_ordered_json(text, path);
      if (document.is_array()) {
        for (auto& row : document) rows.push_back(std::move(row));
      } else {
        rows.push_back(std::move(document));
      }
    } catch (const JsonSyntaxError&) {
      rows = json_lines(text, path);
    }
    text = join_rows(rows);
  } else if (extension == ".jsonl") {
    text = join_rows(json_lines(text, path));
  }
  if (is_blank(text)) throw Error(path + ": raw text file is empty or holds only whitespace");
  return text;
}

std::vector<Sample> chunk_raw_text(const std::string& text, const Tokenizer& tokenizer, const RawTextOptions& options) {
  if (options.chunk_size <= 0) throw UsageError("--chunk_size must be positive, got " + std::to_string(options.chunk_size));
  if (options.stride < 0 || options.stride >= options.chunk_size) {
    throw UsageError("--stride must be at least 0 and smaller than --chunk_size (" + std::to_string(options.chunk_size) +
                     "), got " + std::to_string(options.stride));
  }
  if (is_blank(text)) return {};
  const std::vector<int32_t> tokens = tokenizer.encode(text, /*add_special_tokens=*/false);
  const std::optional<int32_t> eos = tokenizer.special_tokens().eos_token_id;
  const auto chunk_size = static_cast<size_t>(options.chunk_size);
  // The final EOS counts toward chunk_size (a chunk of 1 cannot hold a token and EOS).
  const bool reserve_eos = eos.has_value() && chunk_size > 1;
  const size_t total = tokens.size() + (reserve_eos ? 1 : 0);
  std::vector<std::pair<size_t, size_t>> bounds;
  if (total <= chunk_size) {
    bounds.emplace_back(0, tokens.size());
  } else {
    for (size_t start = 0;; start += chunk_size - static_cast<size_t>(options.stride)) {
      const size_t end = std::min(start + chunk_size, total);
      bounds.emplace_back(start, end);
      if (end == total) break;
    }
    // Stride 0 on an exact multiple would leave EOS alone in the last chunk: end a full window there.
    if (reserve_eos && bounds.size() > 1 && bounds.back().first == tokens.size()) bounds.back().first = total - chunk_size;
  }
  std::vector<Sample> chunks;
  for (size_t i = 0; i < bounds.size(); ++i) {
    const size_t begin = std::min(bounds[i].first, tokens.size());
    const size_t end = std::min(bounds[i].second, tokens.size());
    Sample chunk;
    chunk.input_ids.assign(tokens.begin() + static_cast<std::ptrdiff_t>(begin), tokens.begin() + static_cast<std::ptrdiff_t>(end));
    if (eos && i + 1 == bounds.size()) chunk.input_ids.push_back(*eos);  // EOS only at the true end
    chunk.labels = chunk.input_ids;
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

}  // namespace finetune
