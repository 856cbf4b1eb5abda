// Row-by-row reading of .json / .jsonl dataset files (see dataset_files.h).
#include "finetune/data/dataset_files.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

using nlohmann::ordered_json;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open dataset file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw Error(path + ": read error");
  return buffer.str();
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

// {"col": [v0, v1, ...], ...} with every value a list of one length: rows {"col": v_i, ...}.
bool is_columns_object(const ordered_json& document) {
  if (!document.is_object() || document.empty()) return false;
  const size_t rows = document.begin()->is_array() ? document.begin()->size() : 0;
  for (const auto& [name, column] : document.items()) {
    if (!column.is_array() || column.size() != rows) return false;
  }
  return true;
}

void visit_columns(const std::string& path, const ordered_json& document,
                   const std::function<void(const DatasetRow&)>& visit) {
  const size_t rows = document.begin()->size();
  for (size_t i = 0; i < rows; ++i) {
    DatasetRow row;
    row.location.file = path;
    row.location.element = static_cast<int64_t>(i);
    row.value = ordered_json::object();
    for (const auto& [name, column] : document.items()) row.value[name] = column[i];
    visit(row);
  }
}

// A .json file: an array, JSON Lines, or an object of columns (see dataset_files.h).
void read_json(const std::string& path, const std::function<void(const DatasetRow&)>& visit) {
  const std::string text = read_whole_file(path);
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    ordered_json document = parse_ordered_json(text, path);
    if (!document.is_array()) throw Error(path + ": a .json dataset must hold an array of rows");
    return visit_array(path, document, visit);
  }
  // JSON Lines first, as datasets does; if a line does not parse, the whole text may still be one
  // object of columns spread over several lines.
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
      const ordered_json document = parse_ordered_json(text, path);
      if (is_columns_object(document)) return visit_columns(path, document, visit);
    } catch (const JsonSyntaxError&) {
      // Not one JSON document either: report it as JSON Lines with bad rows.
    }
  }
  for (const DatasetRow& row : rows) visit(row);
}

}  // namespace

std::string RowLocation::describe() const {
  if (element >= 0) return file + " element " + std::to_string(element);
  return file + ":" + std::to_string(line);
}

void for_each_dataset_row(const std::string& path, const std::function<void(const DatasetRow&)>& visit) {
  if (ends_with(path, ".jsonl")) {
    read_jsonl(path, visit);
  } else if (ends_with(path, ".json")) {
    read_json(path, visit);
  } else {
    throw Error(path + ": unsupported dataset file type; expected .json, .jsonl or .parquet");
  }
}

}  // namespace finetune
