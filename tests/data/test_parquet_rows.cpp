// for_each_parquet_row against pyarrow (tests/reference/make_parquet_fixtures.py): every row of
// every fixture equal to the reference, key order included; streaming (rows arrive before a
// corrupt row group is reached, and memory stays far below the decoded file); errors naming the
// file (truncated, not Parquet, missing) and the column and type (no JSON form); .parquet in
// for_each_dataset_row.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../reference/fixtures.h"
#include "../test_support.h"
#include "finetune/data/dataset_files.h"
#include "finetune/data/parquet_rows.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using nlohmann::ordered_json;
using testing::error_message;
using testing::expect_contains;

std::string parquet_fixture(const std::string& name) { return reference::fixture_path("parquet", name); }

std::vector<ordered_json> expected_rows(const std::string& name) {
  std::ifstream in(parquet_fixture(name + ".jsonl"));
  std::vector<ordered_json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(ordered_json::parse(line));
  return rows;
}

std::vector<ordered_json> read_rows(const std::string& path) {
  std::vector<ordered_json> rows;
  for_each_parquet_row(path, [&](int64_t row_index, ordered_json row) {
    EXPECT_EQ(row_index, static_cast<int64_t>(rows.size()));
    rows.push_back(std::move(row));
  });
  return rows;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// Resident set size in bytes (/proc/self/statm: pages).
int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t total_pages = 0, resident_pages = 0;
  statm >> total_pages >> resident_pages;
  return resident_pages * sysconf(_SC_PAGESIZE);
}

class ParquetReference : public ::testing::TestWithParam<const char*> {};

TEST_P(ParquetReference, RowsEqualPyarrows) {
  const std::vector<ordered_json> expected = expected_rows(GetParam());
  const std::vector<ordered_json> actual = read_rows(parquet_fixture(std::string(GetParam()) + ".parquet"));
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(actual[i], expected[i]) << GetParam() << " row " << i << "\n  C++:     " << actual[i].dump()
                                      << "\n  pyarrow: " << expected[i].dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Parquet, ParquetReference,
                         ::testing::Values("types", "alpaca", "messages", "sharegpt", "content_parts", "hf_dataset",
                                           "many_row_groups"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

TEST(ParquetRows, TypesFixtureHasEveryConvertedType) {
  // Guards the reference: a column dropped from the generator would silently shrink coverage.
  const std::vector<ordered_json> rows = expected_rows("types");
  ASSERT_FALSE(rows.empty());
  for (const char* column :
       {"null", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float", "double",
        "string", "large_string", "string_view", "binary", "large_binary", "fixed_binary", "binary_view", "list",
        "large_list", "fixed_list", "nested_list", "struct", "map", "int_map", "dictionary", "timestamp_s",
        "timestamp_ms", "timestamp_us_utc", "timestamp_ns", "timestamp_offset", "timestamp_negative_offset", "date32",
        "date64", "messages"}) {
    EXPECT_TRUE(rows[0].contains(column)) << column;
  }
}

// A reader that converted the whole file before the first visit would report the corruption
// first and visit nothing.
TEST(ParquetRows, StreamsTheRowsBeforeACorruptRowGroup) {
  const std::string path = parquet_fixture("corrupt_tail.parquet");
  const int64_t good_rows = reference::load_json_fixture("parquet", "corrupt_tail.json")["rows_before_corruption"];
  const std::vector<ordered_json> expected = expected_rows("corrupt_tail");
  int64_t visited = 0;
  const std::string message = error_message([&] {
    for_each_parquet_row(path, [&](int64_t row_index, ordered_json row) {
      ASSERT_EQ(row_index, visited);
      ASSERT_EQ(row, expected[row_index]);
      ++visited;
    });
  });
  expect_contains(message, {path, "cannot read the rows from row"});
  EXPECT_GE(visited, kParquetBatchRows);
  EXPECT_LE(visited, good_rows);
}

// big_rows.parquet decodes to ~96 MB of text. Reading it whole grew the resident set by ~146 MB
// (measured with a batch size over the file's rows); streaming by ~20 MB (a batch of ~2 MB, pages,
// malloc's cache). The first, partial read (stopped by the visitor) pages in Arrow's code, so
// what is measured is data.
TEST(ParquetRows, MemoryStaysFarBelowTheDecodedFile) {
  const std::string path = parquet_fixture("big_rows.parquet");
  struct Stop {};
  EXPECT_THROW(for_each_parquet_row(path,
                                    [](int64_t row_index, const ordered_json&) {
                                      if (row_index == 1500) throw Stop{};
                                    }),
               Stop);
  const int64_t before = resident_bytes();
  int64_t peak = before;
  int64_t rows = 0;
  for_each_parquet_row(path, [&](int64_t row_index, const ordered_json& row) {
    ASSERT_EQ(row["index"].get<int64_t>(), row_index);
    ASSERT_EQ(row["text"].get_ref<const std::string&>().size(), 8u + 12u * 166u);
    if (row_index % 256 == 0) peak = std::max(peak, resident_bytes());
    ++rows;
  });
  EXPECT_EQ(rows, 48000);
  RecordProperty("resident_growth_kb", static_cast<int>((peak - before) >> 10));
  EXPECT_LT(peak - before, 48 << 20) << "resident memory grew by " << (peak - before) / (1 << 20)
                                     << " MB while reading a file that decodes to ~96 MB";
}

TEST(ParquetRows, TruncatedFileIsAnErrorNamingIt) {
  const std::string bytes = file_bytes(parquet_fixture("types.parquet"));
  const testing::TempDir dir("parquet");
  for (const size_t size : {size_t{0}, size_t{4}, size_t{12}, bytes.size() / 2, bytes.size() - 9, bytes.size() - 1}) {
    const std::string path = dir.file("truncated_" + std::to_string(size) + ".parquet");
    dir.write("truncated_" + std::to_string(size) + ".parquet", bytes.substr(0, size));
    int64_t visited = 0;
    const std::string message =
        error_message([&] { for_each_parquet_row(path, [&](int64_t, ordered_json) { ++visited; }); });
    expect_contains(message, {path});
    EXPECT_EQ(visited, 0) << size;
  }
}

TEST(ParquetRows, NotParquetIsAnErrorNamingIt) {
  const testing::TempDir dir("parquet");
  dir.write("rows.parquet", "{\"instruction\": \"hi\", \"output\": \"there\"}\n");
  // Magic bytes at both ends, nonsense between: the footer length points outside the file.
  dir.write("magic.parquet", std::string("PAR1") + std::string(64, '\x7f') + "\xff\xff\xff\x7f" + "PAR1");
  for (const char* name : {"rows.parquet", "magic.parquet"}) {
    const std::string path = dir.file(name);
    expect_contains(error_message([&] { read_rows(path); }), {path, "not a Parquet file, or a corrupt one"});
  }
  const std::string missing = dir.file("missing.parquet");
  expect_contains(error_message([&] { read_rows(missing); }), {missing, "cannot open Parquet file"});
}

TEST(ParquetRows, TypeWithoutJsonFormNamesFileColumnAndType) {
  struct Case {
    const char* file;
    std::vector<std::string> parts;
  };
  for (const Case& c : {Case{"unsupported_decimal.parquet", {"column 'price'", "decimal128(10, 2)"}},
                        Case{"unsupported_nested.parquet", {"column 'meta.half'", "halffloat"}},
                        Case{"unsupported_zone.parquet", {"column 'when'", "America/New_York", "time zones"}}}) {
    const std::string path = parquet_fixture(c.file);
    int64_t visited = 0;
    const std::string message =
        error_message([&] { for_each_parquet_row(path, [&](int64_t, ordered_json) { ++visited; }); });
    expect_contains(message, {path});
    expect_contains(message, c.parts);
    EXPECT_EQ(visited, 0) << "the schema is checked before the first row";
  }
}

TEST(ParquetRows, VisitorExceptionsPassThroughUnchanged) {
  struct Stop {};
  int64_t visited = 0;
  EXPECT_THROW(for_each_parquet_row(parquet_fixture("alpaca.parquet"),
                                    [&](int64_t, ordered_json) {
                                      ++visited;
                                      throw Stop{};
                                    }),
               Stop);
  EXPECT_EQ(visited, 1);
}

// pyarrow's one-row file {"text": ["hi"]} (snappy, no dictionary, no statistics) with its data
// page header patched: uncompressed_page_size 12 -> 2^31 - 1 (compressed_page_size 14 -> 10, so
// the page still ends where the column chunk does). Arrow allocated 2 GiB for it before finding
// the snappy data corrupt.
std::string huge_page_parquet() {
  const std::string hex =
      "50415231150015feffffff0f15142c15021500150615061c0000000c2c0200000002010200000068691504192c350018"
      "06736368656d61150200150c250218047465787425004c1c0000001602191c191c26001c150c19250600191804746578"
      "7415021602163e16422608491c150015001502003c1604190619260002000000163e1602260816420028207061727175"
      "65742d6370702d6172726f772076657273696f6e2032362e302e31191c1c0000008800000050415231";
  std::string bytes;
  for (size_t i = 0; i < hex.size(); i += 2) bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return bytes;
}

// Address space in use now (/proc/self/statm: pages).
int64_t virtual_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t total_pages = 0;
  statm >> total_pages;
  return total_pages * sysconf(_SC_PAGESIZE);
}

// Note [Parquet memory bound]: the reader refuses the page's 2 GiB before allocating it. Checked as
// `prlimit --as` would: in a child process whose address space may grow by 512 MiB only, the read
// ends in the bound's error, not in an allocation failure.
TEST(ParquetRows, PageSizesBeyondTheFileAreRefusedBeforeAllocating) {
  const testing::TempDir dir("parquet");
  dir.write("huge_page.parquet", huge_page_parquet());
  const std::string path = dir.file("huge_page.parquet");
  expect_contains(error_message([&] { read_rows(path); }),
                  {path, "cannot read the rows from row 0", "the file's sizes ask for more than the 256 MiB"});
  const int64_t limit = virtual_bytes() + (int64_t{512} << 20);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlimit address_space{static_cast<rlim_t>(limit), static_cast<rlim_t>(limit)};
    int code = 3;
    if (::setrlimit(RLIMIT_AS, &address_space) == 0) {
      try {
        for_each_parquet_row(path, [](int64_t, const ordered_json&) {});
        code = 4;
      } catch (const Error& e) {
        code = std::string(e.what()).find("finetune allows") != std::string::npos ? 0 : 1;
      } catch (const std::bad_alloc&) {
        code = 2;
      }
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: another error, 2: std::bad_alloc, 3: no setrlimit, 4: no error";
}

TEST(ParquetRows, DatasetFilesReadParquetWithRowLocations) {
  const std::string path = parquet_fixture("messages.parquet");
  const std::vector<ordered_json> expected = expected_rows("messages");
  std::vector<DatasetRow> rows;
  for_each_dataset_row(path, [&](const DatasetRow& row) { rows.push_back(row); });
  ASSERT_EQ(rows.size(), expected.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].location.describe(), path + " row " + std::to_string(i));
    EXPECT_EQ(rows[i].value.dump(), expected[i].dump()) << "values and column order";
    EXPECT_TRUE(rows[i].parse_error.empty());
  }
  RowLocation location;
  location.file = "data.parquet";
  location.row = 12;
  EXPECT_EQ(location.describe(), "data.parquet row 12");
}

}  // namespace
}  // namespace finetune
