// Arrow record batches as JSON rows: the value conversions that data/parquet_rows.h documents.
// Internal to the data module, and the only place besides parquet_rows.cpp that sees Arrow's
// headers (C++20: Note [Arrow needs C++20] in CMakeLists.txt).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <arrow/api.h>
#include <nlohmann/json.hpp>

namespace finetune {

// Throws Error naming `file`, the column (nested: "messages[].content", "meta.key") and the type
// when a column of `schema` has a type with no JSON conversion, a time zone other than UTC or a
// fixed offset, a name that is not UTF-8, or nests deeper than kMaxJsonDepth.
void check_json_convertible(const arrow::Schema& schema, const std::string& file);

// The rows of one record batch whose schema passed check_json_convertible and whose data passed
// RecordBatch::ValidateFull (offsets in range, strings UTF-8, dictionary indices valid).
class JsonRows {
 public:
  JsonRows(const arrow::RecordBatch& batch, const std::string& file);

  int64_t size() const { return rows_; }
  // Row i as an object, columns in schema order.
  nlohmann::ordered_json row(int64_t i) const;

 private:
  std::string file_;
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<arrow::Array>> columns_;
  int64_t rows_;
};

}  // namespace finetune
