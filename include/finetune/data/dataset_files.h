// Reading dataset files row by row, each row with its location for error messages. The layouts
// are those HF `datasets` reads (its json and parquet builders):
//   .jsonl    one JSON value per line; blank lines are ignored; a line that is not valid JSON (or
//             nests deeper than kMaxJsonDepth, util/json_parse.h) is handed over with its parse
//             error (so the caller can skip it under skip_bad_rows)
//   .json     a top-level array of rows; or JSON Lines (datasets tries JSON Lines first, so a
//             .json file of one object per line is read like .jsonl); or one object spread over
//             several lines, which is one row (as datasets 5 reads it). Anything else is an error
//             naming the file, line and column.
//   .parquet  one object per row, streamed (data/parquet_rows.h: the value conversions)
//   .txt      one row {"text": line} per line ("\n", "\r\n" or "\r"; empty lines included), as
//             datasets' text builder reads it
// Objects keep their keys in file order (tojson in a chat template shows them in that order).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace finetune {

struct RowLocation {
  std::string file;
  int64_t line = 0;      // 1-based line of a JSON Lines row; 0 otherwise
  int64_t element = -1;  // index of a row in a .json array (0 for a lone object); -1 otherwise
  int64_t row = -1;      // 0-based row index in a .parquet file; -1 otherwise

  // "data.jsonl:12", "data.json element 3" or "data.parquet row 12"
  std::string describe() const;
};

struct DatasetRow {
  RowLocation location;
  nlohmann::ordered_json value;  // null when parse_error is set
  std::string parse_error;       // non-empty when a JSON Lines line is not valid JSON: "column C: reason"
};

// Calls visit(row) for every row of the file, in order. Throws Error naming the file when it cannot
// be read, its extension is not a dataset file type, a .json file has none of the layouts above,
// or a .parquet file is unreadable or has a column of a type with no JSON form.
void for_each_dataset_row(const std::string& path, const std::function<void(const DatasetRow&)>& visit);

}  // namespace finetune
