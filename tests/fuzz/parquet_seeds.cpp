// The parquet_rows target's seeds: small Parquet files written at start-up with Arrow's Parquet
// writer (so this file is C++20: Note [Arrow needs C++20] in CMakeLists.txt), two rows per row
// group, covering the dataset shapes (alpaca, messages, sharegpt, content parts) and every type
// data/parquet_rows.h converts, nulls included. Mostly uncompressed and without dictionary pages,
// so mutations reach page headers and values rather than only breaking a compressed stream.
#include <stdexcept>

#include <arrow/api.h>
#include <arrow/io/memory.h>
#include <arrow/json/from_string.h>
#include <parquet/arrow/writer.h>
#include <parquet/properties.h>

#include "fuzz_seeds.h"

namespace finetune::fuzz {
namespace {

template <typename T>
T checked(arrow::Result<T> result) {
  if (!result.ok()) throw std::runtime_error("parquet seeds: " + result.status().ToString());  // a harness bug
  return std::move(result).ValueUnsafe();
}

void checked(const arrow::Status& status) {
  if (!status.ok()) throw std::runtime_error("parquet seeds: " + status.ToString());
}

std::shared_ptr<arrow::Array> array_from_json(const std::shared_ptr<arrow::DataType>& type, const char* json) {
  return checked(arrow::json::ArrayFromJSONString(type, json));
}

struct Column {
  std::string name;
  std::shared_ptr<arrow::Array> values;
};

std::string parquet_bytes(const std::vector<Column>& columns, parquet::Compression::type compression,
                          bool dictionary) {
  arrow::FieldVector fields;
  arrow::ArrayVector arrays;
  for (const Column& column : columns) {
    fields.push_back(arrow::field(column.name, column.values->type()));
    arrays.push_back(column.values);
  }
  const std::shared_ptr<arrow::Table> table = arrow::Table::Make(arrow::schema(fields), arrays);
  parquet::WriterProperties::Builder properties;
  properties.compression(compression);
  if (!dictionary) properties.disable_dictionary();
  const std::shared_ptr<arrow::io::BufferOutputStream> sink = checked(arrow::io::BufferOutputStream::Create());
  checked(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), sink, /*chunk_size=*/2, properties.build(),
                                     parquet::ArrowWriterProperties::Builder().store_schema()->build()));
  return checked(sink->Finish())->ToString();
}

std::shared_ptr<arrow::DataType> pairs_type(const char* first, const char* second) {
  return arrow::list(arrow::struct_({arrow::field(first, arrow::utf8()), arrow::field(second, arrow::utf8())}));
}

}  // namespace

std::vector<std::string> parquet_rows_seeds() {
  using arrow::field;
  const auto none = parquet::Compression::UNCOMPRESSED;
  std::vector<std::string> seeds;
  seeds.push_back(parquet_bytes(
      {{"instruction", array_from_json(arrow::utf8(), R"(["Say hi", "Add", "Ünïcödé ✓"])")},
       {"input", array_from_json(arrow::utf8(), R"(["", "1 2", null])")},
       {"output", array_from_json(arrow::utf8(), R"(["hi", "3", "😀"])")}},
      none, false));
  seeds.push_back(parquet_bytes(
      {{"messages", array_from_json(pairs_type("role", "content"),
                                    R"([[{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                                         {"role": "assistant", "content": "a"}],
                                        [{"role": "user", "content": null}], null, []])")}},
      none, false));
  seeds.push_back(parquet_bytes(
      {{"conversations", array_from_json(pairs_type("from", "value"),
                                         R"([[{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}],
                                             [{"from": "gpt", "value": "b"}], [null]])")},
       {"id", array_from_json(arrow::int64(), "[1, 2, null]")}},
      parquet::Compression::SNAPPY, true));
  const auto parts = arrow::list(arrow::struct_(
      {field("role", arrow::utf8()),
       field("content", arrow::list(arrow::struct_({field("type", arrow::utf8()), field("text", arrow::utf8())})))}));
  seeds.push_back(parquet_bytes(
      {{"messages", array_from_json(parts, R"([[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                                             [{"role": "assistant", "content": [{"type": "text", "text": null}, null]}],
                                             null])")}},
      none, true));
  seeds.push_back(parquet_bytes(
      {{"b", array_from_json(arrow::boolean(), "[true, null, false]")},
       {"i8", array_from_json(arrow::int8(), "[-128, 127, null]")},
       {"u64", array_from_json(arrow::uint64(), "[18446744073709551615, 0, null]")},
       {"f", array_from_json(arrow::float32(), "[1.5, null, -0.25]")},
       {"d", array_from_json(arrow::float64(), "[1e300, 2.5, null]")},
       {"ls", array_from_json(arrow::large_utf8(), R"(["long", null, ""])")},
       {"bin", array_from_json(arrow::binary(), R"(["AAEC", null, ""])")},
       {"fsb", array_from_json(arrow::fixed_size_binary(2), R"(["ab", "cd", null])")},
       {"ts", array_from_json(arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), "[0, -1, 1700000000123456]")},
       {"tsn", array_from_json(arrow::timestamp(arrow::TimeUnit::NANO), "[1, null, 86400000000000]")},
       {"day", array_from_json(arrow::date32(), "[0, 19000, null]")},
       {"map", array_from_json(arrow::map(arrow::utf8(), arrow::int32()), R"([[["a", 1], ["b", null]], null, []])")},
       {"imap", array_from_json(arrow::map(arrow::int16(), arrow::utf8()), R"([[[1, "x"]], [], null])")},
       // No null list: Arrow < 26 cannot read one back ("Expected all lists to be of size=2").
       {"fsl", array_from_json(arrow::fixed_size_list(arrow::int16(), 2), "[[1, 2], [4, 5], [3, null]]")},
       {"ll", array_from_json(arrow::large_list(arrow::list(arrow::int32())), "[[[1], [], null], null, [[2, 3]]]")},
       {"st", array_from_json(arrow::struct_({field("x", arrow::int32()), field("y", arrow::utf8())}),
                              R"([{"x": 1, "y": "a"}, null, {"x": null, "y": null}])")},
       {"dict", checked(arrow::json::DictArrayFromJSONString(arrow::dictionary(arrow::int32(), arrow::utf8()),
                                                             "[0, 1, null]", R"(["red", "green"])"))},
       {"nulls", array_from_json(arrow::null(), "[null, null, null]")}},
      none, false));
  return seeds;
}

}  // namespace finetune::fuzz
