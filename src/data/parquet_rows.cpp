// Streaming a Parquet file's rows as JSON (see parquet_rows.h): Arrow's Parquet reader hands out
// record batches of kParquetBatchRows rows over the row groups; each is validated, then converted
// row by row (arrow_json.h) while the next is not yet read.
#include "finetune/data/parquet_rows.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <utility>

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/memory_pool.h>
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

// Note [Parquet memory bound]
// Sizes inside a Parquet file (a page header's uncompressed_page_size, up to 2 GiB) decide what
// Arrow allocates before it can find the data corrupt: a 185-byte file made it allocate 2 GiB.
// What one file may hold in memory at once is bounded by its size: kParquetExpansion times the
// file, and at least kParquetMemoryFloor (a real file that expands more than 1024-fold would have
// to be almost all repetition). The reader's own pool counts its allocations (ProxyMemoryPool),
// so other readers in the process do not share the bound.
constexpr int64_t kParquetExpansion = 1024;
constexpr int64_t kParquetMemoryFloor = int64_t{256} << 20;

int64_t parquet_memory_bound(const std::string& path) {
  std::error_code error;
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path, error));
  if (error) return kParquetMemoryFloor;
  return std::max(kParquetMemoryFloor, size > INT64_MAX / kParquetExpansion ? INT64_MAX : size * kParquetExpansion);
}

// The record batches of one file, in order.
class ParquetBatches {
 public:
  explicit ParquetBatches(const std::string& path)
      : path_(path),
        memory_bound_(parquet_memory_bound(path)),
        counted_pool_(arrow::system_memory_pool()),
        pool_(&counted_pool_, memory_bound_) {
    explaining_bound([this] { arrow_call(path_, "not a Parquet file, or a corrupt one", [this] { open(); }); });
  }

  // The next batch, validated (offsets, UTF-8, dictionary indices), or nullptr after the last.
  // `first_row`: the file row index of its first row, for the error message.
  std::shared_ptr<arrow::RecordBatch> next(int64_t first_row) {
    const std::string what = "cannot read the rows from row " + std::to_string(first_row);
    return explaining_bound([&] {
      return arrow_call(path_, what, [&] {
        std::shared_ptr<arrow::RecordBatch> batch;
        check_status(batches_->ReadNext(&batch), path_, what);
        if (batch) check_status(batch->ValidateFull(), path_, what);
        return batch;
      });
    });
  }

 private:
  void open() {
    // The system allocator rather than the wheel's jemalloc/mimalloc: memory returns to the
    // process as batches are freed, and a memory limit (RLIMIT_AS) fails allocations cleanly.
    arrow::MemoryPool* pool = &pool_;
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

  // Runs `action`; an allocation refused by the bound (Note [Parquet memory bound]) is explained.
  template <typename Action>
  auto explaining_bound(Action&& action) -> decltype(action()) {
    try {
      return action();
    } catch (const Error& e) {
      if (std::string(e.what()).find("Out of memory") == std::string::npos) throw;
      throw Error(std::string(e.what()) + " (the file's sizes ask for more than the " +
                  std::to_string(memory_bound_ >> 20) + " MiB finetune allows a Parquet file of this size: its "
                  "metadata or page headers are corrupt)");
    }
  }

  std::string path_;
  int64_t memory_bound_;
  arrow::ProxyMemoryPool counted_pool_;  // both pools outlive the reader and its buffers
  arrow::CappedMemoryPool pool_;
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
