// Row-by-row reading of .json / .jsonl / .parquet dataset files (see dataset_files.h).
#include "finetune/data/dataset_files.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "finetune/data/parquet_rows.h"
#include "finetune/util/errors.h"
#include "finetune/util/file_contents.h"
#include "finetune/util/json_parse.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

using nlohmann::ordered_json;

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

DatasetRow row_at_line(const std::string& path, int64_t line_number, const std::string& line) {
  DatasetRow row;
  row.location.file = path;
  row.location.line = line_number;
  try {
    row.value = parse_ordered_json(line, path);
  } catch (const JsonSyntaxError& e) {  // the row's problem; under skip_bad_rows the file goes on
    row.parse_error = "column " + std::to_string(e.column()) + ": " + e.reason();
  }
  return row;
}

void read_jsonl(const std::string& path, const std::function<void(const DatasetRow&)>& visit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open dataset file");
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (!is_blank(line)) visit(row_at_line(path, line_number, line));
  }
  if (in.bad()) throw Error(path + ": read error after line " + std::to_string(line_number));
}

void visit_array(const std::string& path, ordered_json& document, const std::function<void(const DatasetRow&)>& visit) {
  for (size_t i = 0; i < document.size(); ++i) {
    DatasetRow row;
    row.location.file = path;
    row.location.element = static_cast<int64_t>(i);
    row.value = std::move(document[i]);
    visit(row);
  }
}

// A .json file: an array, JSON Lines, or one object over several lines (see dataset_files.h).
void read_json(const std::string& path, const std::function<void(const DatasetRow&)>& visit) {
  const std::string text = read_file(path, "dataset file");
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    ordered_json document = parse_ordered_json(text, path);
    if (!document.is_array()) throw Error(path + ": a .json dataset must hold an array of rows");
    return visit_array(path, document, visit);
  }
  // JSON Lines first, as datasets does; if a line does not parse, the whole text may still be one
  // pretty-printed object: one row, as datasets reads it.
  std::vector<DatasetRow> rows;
  bool every_line_parses = true;
  std::istringstream lines(text);
  std::string line;
  int64_t line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    if (is_blank(line)) continue;
    rows.push_back(row_at_line(path, line_number, line));
    if (!rows.back().parse_error.empty()) every_line_parses = false;
  }
  if (!every_line_parses) {
    try {
      ordered_json document = parse_ordered_json(text, path);
      if (document.is_object()) {
        DatasetRow row;
        row.location.file = path;
        row.location.element = 0;
        row.value = std::move(document);
        return visit(row);
      }
    } catch (const JsonSyntaxError&) {
      // Not one JSON document either: report it as JSON Lines with bad rows.
    }
  }
  for (const DatasetRow& row : rows) visit(row);
}

// The line break at `pos` in Python's text mode (universal newlines: "\n", "\r\n" and a lone
// "\r"): its length, 0 if none. Other Unicode line separators stay in the line, as datasets reads it.
size_t line_boundary_at(const std::string& text, size_t pos) {
  if (text[pos] == '\r') return pos + 1 < text.size() && text[pos + 1] == '\n' ? 2 : 1;
  return text[pos] == '\n' ? 1 : 0;
}

// A .txt file as HF datasets' text builder reads it: one row {"text": line} per line (empty lines
// included, line breaks dropped).
void read_text_lines(const std::string& path, const std::function<void(const DatasetRow&)>& visit) {
  const std::string text = read_file(path, "dataset file");
  int64_t line_number = 0;
  size_t start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t boundary = line_boundary_at(text, pos);
    if (boundary == 0) {
      ++pos;
      continue;
    }
    DatasetRow row;
    row.location.file = path;
    row.location.line = ++line_number;
    row.value = ordered_json{{"text", text.substr(start, pos - start)}};
    visit(row);
    pos += boundary;
    start = pos;
  }
  if (start < text.size()) {
    DatasetRow row;
    row.location.file = path;
    row.location.line = ++line_number;
    row.value = ordered_json{{"text", text.substr(start)}};
    visit(row);
  }
}

void read_parquet(const std::string& path, const std::function<void(const DatasetRow&)>& visit) {
  for_each_parquet_row(path, [&](int64_t row_index, ordered_json value) {
    DatasetRow row;
    row.location.file = path;
    row.location.row = row_index;
    row.value = std::move(value);
    visit(row);
  });
}

}  // namespace

std::string RowLocation::describe() const {
  if (row >= 0) return file + " row " + std::to_string(row);
  if (element >= 0) return file + " element " + std::to_string(element);
  return file + ":" + std::to_string(line);
}

void for_each_dataset_row(const std::string& path, const std::function<void(const DatasetRow&)>& visit) {
  if (ends_with(path, ".jsonl")) {
    read_jsonl(path, visit);
  } else if (ends_with(path, ".json")) {
    read_json(path, visit);
  } else if (ends_with(path, ".parquet")) {
    read_parquet(path, visit);
  } else if (ends_with(path, ".txt")) {
    read_text_lines(path, visit);
  } else {
    throw Error(path + ": unsupported dataset file type; expected .json, .jsonl, .parquet or .txt");
  }
}

}  // namespace finetune
