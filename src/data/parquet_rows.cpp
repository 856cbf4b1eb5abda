// Streaming a Parquet file's rows as JSON (see parquet_rows.h): Arrow's Parquet reader hands out
// record batches of kParquetBatchRows rows over the row groups; each is validated, then converted
// row by row (arrow_json.h) while the next is not yet read.
#include "finetune/data/parquet_rows.h"

#include <exception>
#include <memory>
#include <utility>

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/properties.h>

#include "arrow_json.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// Arrow reports failures as Status; Parquet also throws (ParquetException, and std::bad_alloc or
// std::length_error for sizes a corrupt footer makes up). Each becomes an Error naming the file.
template <typename Action>
auto arrow_call(const std::string& path, const std::string& what, Action&& action) -> decltype(action()) {
  try {
    return action();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(path + ": " + what + ": " + e.what());
  }
}

void check_status(const arrow::Status& status, const std::string& path, const std::string& what) {
  if (!status.ok()) throw Error(path + ": " + what + ": " + status.ToString());
}

template <typename T>
T value_or_throw(arrow::Result<T> result, const std::string& path, const std::string& what) {
  check_status(result.status(), path, what);
  return std::move(result).ValueUnsafe();
}

// The record batches of one file, in order.
class ParquetBatches {
 public:
  explicit ParquetBatches(const std::string& path) : path_(path) {
    arrow_call(path_, "not a Parquet file, or a corrupt one", [this] { open(); });
  }

  // The next batch, validated (offsets, UTF-8, dictionary indices), or nullptr after the last.
  // `first_row`: the file row index of its first row, for the error message.
  std::shared_ptr<arrow::RecordBatch> next(int64_t first_row) {
    const std::string what = "cannot read the rows from row " + std::to_string(first_row);
    return arrow_call(path_, what, [&] {
      std::shared_ptr<arrow::RecordBatch> batch;
      check_status(batches_->ReadNext(&batch), path_, what);
      if (batch) check_status(batch->ValidateFull(), path_, what);
      return batch;
    });
  }

 private:
  void open() {
    // The system allocator rather than the wheel's jemalloc/mimalloc: memory returns to the
    // process as batches are freed, and a memory limit (RLIMIT_AS) fails allocations cleanly.
    arrow::MemoryPool* pool = arrow::system_memory_pool();
    std::shared_ptr<arrow::io::ReadableFile> file =
        value_or_throw(arrow::io::ReadableFile::Open(path_, pool), path_, "cannot open Parquet file");
    parquet::ReaderProperties properties(pool);
    properties.enable_buffered_stream();  // pages, not whole column chunks, in memory
    parquet::ArrowReaderProperties arrow_properties(/*use_threads=*/false);
    arrow_properties.set_batch_size(kParquetBatchRows);
    arrow_properties.set_pre_buffer(false);  // pre-buffering reads whole row groups ahead
    parquet::arrow::FileReaderBuilder builder;
    check_status(builder.Open(file, properties), path_, "not a Parquet file, or a corrupt one");
    builder.memory_pool(pool)->properties(arrow_properties);
    reader_ = value_or_throw(builder.Build(), path_, "cannot read the Parquet schema");
    std::shared_ptr<arrow::Schema> schema;
    check_status(reader_->GetSchema(&schema), path_, "cannot read the Parquet schema");
    check_json_convertible(*schema, path_);
    batches_ = value_or_throw(reader_->GetRecordBatchReader(), path_, "cannot read the row groups");
  }

  std::string path_;
  std::unique_ptr<parquet::arrow::FileReader> reader_;          // outlives batches_
  std::unique_ptr<arrow::RecordBatchReader> batches_;
};

}  // namespace

void for_each_parquet_row(const std::string& path,
                          const std::function<void(int64_t row_index, nlohmann::ordered_json row)>& visit) {
  ParquetBatches batches(path);
  int64_t row_index = 0;
  while (const std::shared_ptr<arrow::RecordBatch> batch = batches.next(row_index)) {
    const JsonRows rows(*batch, path);
    for (int64_t i = 0; i < rows.size(); ++i) visit(row_index++, rows.row(i));
  }
}

}  // namespace finetune
