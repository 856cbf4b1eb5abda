// Reading dataset files row by row, each row with its location for error messages:
//   .jsonl  one JSON value per line; blank lines are ignored; a line that is not valid JSON (or
//           nests deeper than kMaxJsonDepth, util/json_parse.h) is handed over with its parse error
//           (so the caller can skip it under skip_bad_rows)
//   .json   a top-level array; the whole file must parse (an error names file, line and column)
//   .parquet one JSON object per row, streamed (data/parquet_rows.h: the value conversions)
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace finetune {

struct RowLocation {
  std::string file;
  int64_t line = 0;      // 1-based line of a .jsonl row; 0 for .json
  int64_t element = -1;  // index of a .json array element; -1 for .jsonl
  int64_t row = -1;      // 0-based row index in a .parquet file; -1 otherwise

  // "data.jsonl:12", "data.json element 3" or "data.parquet row 12"
  std::string describe() const;
};

struct DatasetRow {
  RowLocation location;
  nlohmann::json value;     // null when parse_error is set
  std::string parse_error;  // non-empty when a .jsonl line is not valid JSON: "column C: reason"
};

// Calls visit(row) for every row of the file, in order. Throws Error naming the file when it cannot
// be read, its extension is none of .json, .jsonl and .parquet, a .json file is not a valid JSON
// array, or a .parquet file is unreadable or has a column of a type with no JSON form.
void for_each_dataset_row(const std::string& path, const std::function<void(const DatasetRow&)>& visit);

}  // namespace finetune
