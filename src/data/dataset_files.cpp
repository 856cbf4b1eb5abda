// Row-by-row reading of .json / .jsonl / .parquet dataset files (see dataset_files.h).
#include "finetune/data/dataset_files.h"

#include <fstream>

#include "finetune/data/parquet_rows.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

std::ifstream open_dataset_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open dataset file");
  return in;
}

void read_jsonl(const std::string& path, const std::function<void(const DatasetRow&)>& visit) {
  std::ifstream in = open_dataset_file(path);
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (is_blank(line)) continue;
    DatasetRow row;
    row.location.file = path;
    row.location.line = line_number;
    try {
      row.value = parse_json(line, path);
    } catch (const JsonSyntaxError& e) {  // the row's problem; under skip_bad_rows the file goes on
      row.parse_error = "column " + std::to_string(e.column()) + ": " + e.reason();
    }
    visit(row);
  }
  if (in.bad()) throw Error(path + ": read error after line " + std::to_string(line_number));
}

void read_json_array(const std::string& path, const std::function<void(const DatasetRow&)>& visit) {
  nlohmann::json document = read_json_file(path);
  if (!document.is_array()) {
    throw Error(path + ": a .json dataset must be a top-level array of objects, got " +
                std::string(document.type_name()));
  }
  for (size_t i = 0; i < document.size(); ++i) {
    DatasetRow row;
    row.location.file = path;
    row.location.element = static_cast<int64_t>(i);
    row.value = std::move(document[i]);
    visit(row);
  }
}

void read_parquet(const std::string& path, const std::function<void(const DatasetRow&)>& visit) {
  for_each_parquet_row(path, [&](int64_t row_index, nlohmann::ordered_json value) {
    DatasetRow row;
    row.location.file = path;
    row.location.row = row_index;
    row.value = nlohmann::json(value);  // DatasetRow holds nlohmann::json, as for .json/.jsonl: keys sorted
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
    read_json_array(path, visit);
  } else if (ends_with(path, ".parquet")) {
    read_parquet(path, visit);
  } else {
    throw Error(path + ": unsupported dataset file type; expected .json (an array of objects), .jsonl or .parquet");
  }
}

}  // namespace finetune
