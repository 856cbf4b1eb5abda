// Reading a Parquet file row by row as JSON objects (Apache Arrow's Parquet reader, from the
// pyarrow wheel: README "Dependencies"). Rows are streamed a record batch at a time over the row
// groups (kParquetBatchRows rows), so a file is never held in memory whole.
//
// Each row is an object with the columns in schema order; values convert as pyarrow's
// Table.to_pylist() followed by json.dumps would give them (tests/reference/make_parquet_fixtures.py
// is that reference), with these choices where Python has no JSON form:
//   null                           null (at any level: a null list, struct, element or field)
//   bool, int8..int64, uint8..64   true/false, numbers (uint64 above INT64_MAX stays unsigned)
//   float, double                  numbers; NaN and infinities become null (JSON has neither)
//   string, large_string, string_view, and dictionary-encoded columns of any supported type
//                                  the (decoded) value; strings must be valid UTF-8
//   binary, large_binary, fixed_size_binary, binary_view
//                                  standard base64 with padding (RFC 4648), e.g. the bytes of an
//                                  HF Image feature, so such a column does not make the file unreadable
//   list, large_list, fixed_size_list  arrays
//   struct                         objects, fields in schema order
//   map                            an object when the keys are strings (a repeated key keeps its
//                                  first position and its last value, as a Python dict does), else
//                                  an array of [key, value] pairs
//   timestamp                      Python's str() of the datetime: "2024-01-02 03:04:05", with
//                                  ".ffffff" when there are microseconds and ".fffffffff" when
//                                  there are nanoseconds (pandas' str()); a timezone of "UTC" or
//                                  "+HH:MM"/"-HH:MM" shifts to local time and appends the offset
//                                  ("+00:00"); named zones other than UTC are unsupported
//   date32, date64                 "2024-01-02"
// Any other type (decimal, float16, time, duration, interval, union, list_view, extension types,
// named time zones) is an Error naming the file, the column and the type, thrown before the first
// row; so is nesting deeper than kMaxJsonDepth (util/json_parse.h). A file that is not Parquet, is
// truncated or corrupt is an Error naming the file: every Arrow Status and Parquet exception
// becomes a finetune::Error here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace finetune {

// Rows per record batch: the unit of memory while streaming (a few MB for chat rows).
constexpr int64_t kParquetBatchRows = 1024;

// Calls visit(row_index, row) for each row in file order; row_index counts from 0 over the whole
// file. Exceptions thrown by visit propagate unchanged.
void for_each_parquet_row(const std::string& path,
                          const std::function<void(int64_t row_index, nlohmann::ordered_json row)>& visit);

}  // namespace finetune
