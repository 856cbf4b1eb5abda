// Raw text files -> overlapping token chunks (see raw_text.h).
#include "finetune/data/raw_text.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "finetune/util/errors.h"
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
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open raw text file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
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
  const std::vector<int32_t> tokens = tokenizer.encode(text, /*add_special_tokens=*/false);
  const std::optional<int32_t> eos = tokenizer.special_tokens().eos_token_id;
  const auto chunk_size = static_cast<size_t>(options.chunk_size);
  const auto step = static_cast<size_t>(options.chunk_size - options.stride);
  std::vector<Sample> chunks;
  for (size_t start = 0; start < tokens.size(); start += step) {
    const size_t end = std::min(start + chunk_size, tokens.size());
    Sample chunk;
    chunk.input_ids.assign(tokens.begin() + static_cast<std::ptrdiff_t>(start), tokens.begin() + static_cast<std::ptrdiff_t>(end));
    if (eos && (end == tokens.size() || end - start == chunk_size)) chunk.input_ids.push_back(*eos);
    chunk.labels = chunk.input_ids;
    chunks.push_back(std::move(chunk));
    if (end == tokens.size()) break;
  }
  return chunks;
}

}  // namespace finetune
