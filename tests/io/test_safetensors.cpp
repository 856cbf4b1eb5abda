// SafetensorsFile and write_safetensors without any reference data: round trips for every dtype,
// the exact bytes the writer produces, and malformed files crafted byte by byte.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include "finetune/io/safetensors.h"
#include "finetune/util/errors.h"
#include "io_test_helpers.h"

namespace finetune {
namespace {

using io_test::Bytes;
using io_test::pattern_bytes;
using io_test::read_bytes;
using io_test::safetensors_bytes;
using io_test::TempDir;
using io_test::u64_le;
using io_test::write_bytes;

constexpr DType kAllDTypes[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64,
                                DType::I32, DType::I16, DType::I8,  DType::U8,   DType::BOOL};

using testing::error_message;

Bytes tensor_bytes(const SafetensorsFile& file, const TensorInfo& info) {
  const auto* data = static_cast<const uint8_t*>(file.data(info));
  return Bytes(data, data + (info.end - info.begin));
}

// Owned tensor contents, for building TensorViews.
struct OwnedTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  Bytes bytes;
};

OwnedTensor make_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                        uint8_t seed) {
  const size_t size = static_cast<size_t>(element_count(shape)) * dtype_size(dtype);
  Bytes bytes = pattern_bytes(size, seed);
  if (dtype == DType::BOOL) {
    for (uint8_t& b : bytes) b &= 1;
  }
  return {name, dtype, std::move(shape), std::move(bytes)};
}

std::vector<TensorView> views_of(const std::vector<OwnedTensor>& tensors) {
  std::vector<TensorView> views;
  for (const OwnedTensor& t : tensors) {
    views.push_back({t.name, t.dtype, t.shape, t.bytes.empty() ? nullptr : t.bytes.data()});
  }
  return views;
}

// ---------------------------------------------------------------------------- dtype helpers

TEST(DType, SizesAndNamesRoundTrip) {
  const std::vector<std::pair<std::string, size_t>> expected = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  ASSERT_EQ(std::size(kAllDTypes), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(dtype_name(kAllDTypes[i]), expected[i].first);
    EXPECT_EQ(dtype_size(kAllDTypes[i]), expected[i].second);
    EXPECT_EQ(dtype_from_name(expected[i].first, "ctx"), kAllDTypes[i]);
  }
}

TEST(DType, UnknownNameNamesContextAndName) {
  const std::string message = error_message([] { dtype_from_name("f32", "file 'x': tensor 'w'"); });
  EXPECT_NE(message.find("file 'x': tensor 'w'"), std::string::npos) << message;
  EXPECT_NE(message.find("'f32'"), std::string::npos) << message;
  EXPECT_THROW(dtype_from_name("F8_E4M3", "ctx"), Error);
  EXPECT_THROW(dtype_from_name("", "ctx"), Error);
}

TEST(DType, ElementCount) {
  EXPECT_EQ(element_count({}), 1);
  EXPECT_EQ(element_count({0}), 0);
  EXPECT_EQ(element_count({2, 0, 5}), 0);
  EXPECT_EQ(element_count({2, 3, 4}), 24);
  EXPECT_EQ(element_count({int64_t{1} << 31, int64_t{1} << 31}), int64_t{1} << 62);
  EXPECT_THROW(element_count({3, -1}), Error);
  EXPECT_THROW(element_count({int64_t{1} << 32, int64_t{1} << 32}), Error);
  EXPECT_EQ(shape_to_string({}), "[]");
  EXPECT_EQ(shape_to_string({4096, 11008}), "[4096, 11008]");
}

// ---------------------------------------------------------------------------- round trips

TEST(SafetensorsRoundTrip, EveryDTypeAndShapeKind) {
  TempDir dir;
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {5}, {2, 3}, {2, 0, 4}, {1, 1, 3}};
  std::vector<OwnedTensor> tensors;
  uint8_t seed = 1;
  for (DType dtype : kAllDTypes) {
    for (size_t s = 0; s < shapes.size(); ++s) {
      tensors.push_back(make_tensor("t." + dtype_name(dtype) + "." + std::to_string(s), dtype,
                                    shapes[s], seed++));
    }
  }
  const std::string path = dir.file("all.safetensors");
  write_safetensors(path, views_of(tensors));

  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_TRUE(file.metadata().empty());
  ASSERT_EQ(file.tensors().size(), tensors.size());
  for (const OwnedTensor& expected : tensors) {
    SCOPED_TRACE(expected.name);
    const TensorInfo& info = file.at(expected.name);
    EXPECT_EQ(info.name, expected.name);
    EXPECT_EQ(info.dtype, expected.dtype);
    EXPECT_EQ(info.shape, expected.shape);
    EXPECT_EQ(tensor_bytes(file, info), expected.bytes);
    // Laid out larger dtypes first, so every tensor is aligned to its element size.
    EXPECT_EQ(info.begin % dtype_size(info.dtype), 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(file.data(info)) % dtype_size(info.dtype), 0u);
  }
}

TEST(SafetensorsRoundTrip, OneFilePerDTypeIncludingScalarAndEmpty) {
  TempDir dir;
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<OwnedTensor> tensors = {make_tensor("scalar", dtype, {}, 7),
                                              make_tensor("empty", dtype, {0, 3}, 0),
                                              make_tensor("matrix", dtype, {3, 4}, 9)};
    const std::string path = dir.file(dtype_name(dtype) + ".safetensors");
    write_safetensors(path, views_of(tensors), {{"dtype", dtype_name(dtype)}});
    SafetensorsFile file = SafetensorsFile::open(path);
    EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"dtype", dtype_name(dtype)}}));
    for (const OwnedTensor& expected : tensors) {
      const TensorInfo& info = file.at(expected.name);
      EXPECT_EQ(info.dtype, dtype);
      EXPECT_EQ(info.shape, expected.shape);
      EXPECT_EQ(tensor_bytes(file, info), expected.bytes);
    }
    EXPECT_EQ(file.at("scalar").end - file.at("scalar").begin, dtype_size(dtype));
    EXPECT_EQ(file.at("empty").begin, file.at("empty").end);
  }
}

TEST(SafetensorsRoundTrip, MetadataWithUnicodeAndSpecialCharacters) {
  TempDir dir;
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"quote\"and\\slash", "line\nbreak\ttab"},
                                                       {"unicode", "\xC3\xA9\xE4\xB8\xAD"},
                                                       {"empty", ""}};
  const OwnedTensor tensor = make_tensor("w", DType::F32, {2}, 3);
  const std::string path = dir.file("meta.safetensors");
  write_safetensors(path, views_of({tensor}), metadata);
  EXPECT_EQ(SafetensorsFile::open(path).metadata(), metadata);
}

TEST(SafetensorsRoundTrip, NoTensorsAtAll) {
  TempDir dir;
  const std::string path = dir.file("empty.safetensors");
  write_safetensors(path, {}, {{"k", "v"}});
  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_TRUE(file.tensors().empty());
  EXPECT_EQ(file.metadata().at("k"), "v");
}

// ---------------------------------------------------------------------------- writer format

TEST(SafetensorsWriter, ExactBytesOfASmallFile) {
  TempDir dir;
  const Bytes a_bytes = {1, 2, 3, 4, 5, 6, 7, 8};
  const Bytes b_bytes = {9, 10};
  const std::string path = dir.file("small.safetensors");
  write_safetensors(path,
                    {{"b", DType::U8, {2}, b_bytes.data()}, {"a", DType::F32, {2}, a_bytes.data()}},
                    {{"format", "pt"}});
  std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  Bytes data = a_bytes;
  data.insert(data.end(), b_bytes.begin(), b_bytes.end());
  EXPECT_EQ(read_bytes(path), safetensors_bytes(header, data));
}

TEST(SafetensorsWriter, HeaderInNameOrderDataByDTypeSizeWithoutGaps) {
  TempDir dir;
  const std::vector<OwnedTensor> tensors = {
      make_tensor("a_u8", DType::U8, {3}, 1), make_tensor("b_f64", DType::F64, {2}, 2),
      make_tensor("c_f16", DType::F16, {5}, 3), make_tensor("d_i32", DType::I32, {1}, 4),
      make_tensor("e_bool", DType::BOOL, {1}, 5)};
  const std::string path = dir.file("order.safetensors");
  write_safetensors(path, views_of(tensors));

  const Bytes bytes = read_bytes(path);
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);  // the test host is little-endian
  EXPECT_EQ(header_length % 8, 0u);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + header_length);
  size_t previous = 0;
  for (const OwnedTensor& t : tensors) {  // given in name order
    const size_t position = header.find("\"" + t.name + "\"");
    ASSERT_NE(position, std::string::npos);
    EXPECT_GT(position, previous) << t.name;
    previous = position;
  }

  SafetensorsFile file = SafetensorsFile::open(path);
  std::vector<std::string> file_order;
  uint64_t expected_begin = 0;
  for (const TensorInfo& info : file.tensors()) {
    file_order.push_back(info.name);
    EXPECT_EQ(info.begin, expected_begin) << info.name;  // no holes: the Python reader needs this
    expected_begin = info.end;
  }
  EXPECT_EQ(expected_begin, bytes.size() - 8 - header_length);
  EXPECT_EQ(file_order, (std::vector<std::string>{"b_f64", "d_i32", "c_f16", "a_u8", "e_bool"}));
}

TEST(SafetensorsWriter, ReplacesExistingFileAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  write_bytes(path, Bytes(100, 0xAB));
  const OwnedTensor tensor = make_tensor("w", DType::I16, {4}, 11);
  write_safetensors(path, views_of({tensor}));
  EXPECT_EQ(tensor_bytes(SafetensorsFile::open(path), SafetensorsFile::open(path).at("w")),
            tensor.bytes);
  std::vector<std::string> entries;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    entries.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(entries, std::vector<std::string>{"w.safetensors"});
}

TEST(SafetensorsWriter, RejectsBadInputNamingFileAndTensor) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const Bytes bytes(16, 1);
  struct Case {
    std::vector<TensorView> tensors;
    std::string phrase;
  };
  const std::vector<Case> cases = {
      {{{"w", DType::F32, {2}, bytes.data()}, {"w", DType::F32, {1}, bytes.data()}}, "'w'"},
      {{{"w", DType::F32, {2}, nullptr}}, "'w'"},
      {{{"w", DType::F32, {-2}, bytes.data()}}, "'w'"},
      {{{"w", DType::F32, {int64_t{1} << 40, int64_t{1} << 40}, bytes.data()}}, "'w'"},
      {{{"__metadata__", DType::U8, {1}, bytes.data()}}, "__metadata__"},
  };
  for (const Case& c : cases) {
    const std::string message = error_message([&] { write_safetensors(path, c.tensors); });
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(c.phrase), std::string::npos) << message;
    EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "left a file behind: " << message;
  }
  // Null data is fine when there are no bytes to write.
  write_safetensors(path, {{"empty", DType::F32, {0, 7}, nullptr}});
  EXPECT_EQ(SafetensorsFile::open(path).at("empty").shape, (std::vector<int64_t>{0, 7}));
}

TEST(SafetensorsWriter, MissingDirectoryNamesThePath) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/x.safetensors");
  const std::string message = error_message([&] { write_safetensors(path, {}); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
}

// A streamed write makes each tensor's bytes when the writer reaches it, in the data section's
// order, and lets them go before making the next.
TEST(SafetensorsWriter, StreamedWriteIsTheSameFileMadeOneTensorAtATime) {
  TempDir dir;
  const std::vector<OwnedTensor> tensors = {make_tensor("b", DType::F16, {3, 2}, 1), make_tensor("a", DType::F32, {4}, 2),
                                            make_tensor("c", DType::U8, {5}, 3), make_tensor("e", DType::F32, {0}, 4)};
  write_safetensors(dir.file("whole.safetensors"), views_of(tensors), {{"format", "pt"}});
  std::vector<std::string> made;
  int alive = 0;
  std::vector<TensorSource> sources;
  for (const OwnedTensor& tensor : tensors) {
    sources.push_back({tensor.name, tensor.dtype, tensor.shape, [&tensor, &made, &alive] {
                         EXPECT_EQ(alive, 0) << "the previous tensor's bytes are still held making " << tensor.name;
                         made.push_back(tensor.name);
                         auto copy = std::make_shared<Bytes>(tensor.bytes);
                         ++alive;
                         return std::shared_ptr<const void>(copy->data(), [copy, &alive](const void*) { --alive; });
                       }});
  }
  write_safetensors_streamed(dir.file("streamed.safetensors"), sources, {{"format", "pt"}});
  EXPECT_EQ(read_bytes(dir.file("streamed.safetensors")), read_bytes(dir.file("whole.safetensors")));
  EXPECT_EQ(made, (std::vector<std::string>{"a", "e", "b", "c"}));  // F32 before F16 before U8, then by name
  EXPECT_EQ(alive, 0);
}

TEST(SafetensorsWriter, StreamedWriteThatFailsLeavesNoFile) {
  TempDir dir;
  const OwnedTensor tensor = make_tensor("w", DType::F32, {2}, 5);
  const std::string path = dir.file("failed.safetensors");
  const auto bytes = [&tensor] { return std::shared_ptr<const void>(std::shared_ptr<void>(), tensor.bytes.data()); };
  const std::vector<TensorSource> failing = {{"v", DType::F32, {2}, bytes},
                                             {"w", DType::F32, {2}, []() -> std::shared_ptr<const void> {
                                                throw std::runtime_error("merge failed");
                                              }}};
  EXPECT_THROW(write_safetensors_streamed(path, failing), std::runtime_error);
  const std::vector<TensorSource> null_data = {{"w", DType::F32, {2}, [] { return std::shared_ptr<const void>(); }}};
  const std::string message = error_message([&] { write_safetensors_streamed(path, null_data); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("'w'"), std::string::npos) << message;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// ---------------------------------------------------------------------------- reader API

TEST(SafetensorsFile, MoveKeepsTheMappingAlive) {
  TempDir dir;
  const OwnedTensor tensor = make_tensor("w", DType::F32, {8}, 5);
  const std::string path = dir.file("m.safetensors");
  write_safetensors(path, views_of({tensor}));

  SafetensorsFile first = SafetensorsFile::open(path);
  SafetensorsFile moved(std::move(first));
  EXPECT_TRUE(
      first.tensors().empty());  // NOLINT(bugprone-use-after-move): checks the moved-from state
  EXPECT_EQ(first.find("w"), nullptr);
  EXPECT_EQ(tensor_bytes(moved, moved.at("w")), tensor.bytes);

  SafetensorsFile other = SafetensorsFile::open(path);
  other = std::move(moved);
  EXPECT_EQ(tensor_bytes(other, other.at("w")), tensor.bytes);
  other = SafetensorsFile::open(path);  // unmaps the previous mapping
  EXPECT_EQ(tensor_bytes(other, other.at("w")), tensor.bytes);
}

// This process's file-backed resident memory (RssFile of /proc/self/status), in bytes.
int64_t resident_file_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssFile:", 0) == 0) return std::stoll(line.substr(8)) * 1024;
  }
  return -1;
}

TEST(SafetensorsFile, ReleasedPagesLeaveTheProcessAndReadBackTheSame) {
  TempDir dir;
  const OwnedTensor tensor = make_tensor("w", DType::U8, {int64_t{32} << 20}, 9);
  const std::string path = dir.file("big.safetensors");
  write_safetensors(path, views_of({tensor}));
  const SafetensorsFile file = SafetensorsFile::open(path);
  const TensorInfo& info = file.at("w");
  const auto* data = static_cast<const uint8_t*>(file.data(info));
  const size_t size = info.end - info.begin;
  uint64_t sum = 0;
  for (size_t i = 0; i < size; i += 4096) sum += data[i];  // maps every page in
  const int64_t mapped = resident_file_bytes();
  file.release_pages(data, size);
  const int64_t released = resident_file_bytes();
  if (mapped >= 0) EXPECT_GE(mapped - released, int64_t{30} << 20) << "RssFile " << mapped << " -> " << released;
  EXPECT_EQ(tensor_bytes(file, info), tensor.bytes);  // read again from the file
  EXPECT_GT(sum, 0u);
  EXPECT_NO_THROW(file.release_pages(data + 1, 10));  // rounded out to whole pages
  EXPECT_EQ(tensor_bytes(file, info), tensor.bytes);
  const Bytes outside(8);
  const std::string message = error_message([&] { file.release_pages(outside.data(), outside.size()); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_THROW(file.release_pages(data, size + 4096), Error);
}

TEST(SafetensorsFile, LookupErrorsNameFileAndTensor) {
  TempDir dir;
  const OwnedTensor tensor = make_tensor("w", DType::F32, {2}, 5);
  write_safetensors(dir.file("a.safetensors"), views_of({tensor}));
  write_safetensors(dir.file("b.safetensors"), views_of({make_tensor("x", DType::U8, {1}, 1),
                                                         make_tensor("w", DType::U8, {200}, 1)}));
  SafetensorsFile a = SafetensorsFile::open(dir.file("a.safetensors"));
  SafetensorsFile b = SafetensorsFile::open(dir.file("b.safetensors"));
  EXPECT_EQ(a.find("nope"), nullptr);
  std::string message = error_message([&] { a.at("nope"); });
  EXPECT_NE(message.find(dir.file("a.safetensors")), std::string::npos) << message;
  EXPECT_NE(message.find("'nope'"), std::string::npos) << message;
  // A TensorInfo from another file would index out of bounds: refused.
  message = error_message([&] { a.data(b.at("w")); });
  EXPECT_NE(message.find("'w'"), std::string::npos) << message;
}

TEST(SafetensorsFile, MissingFileAndDirectoryAreErrors) {
  TempDir dir;
  std::string message =
      error_message([&] { SafetensorsFile::open(dir.file("missing.safetensors")); });
  EXPECT_NE(message.find(dir.file("missing.safetensors")), std::string::npos) << message;
  message = error_message([&] { SafetensorsFile::open(dir.path().string()); });
  EXPECT_NE(message.find(dir.path().string()), std::string::npos) << message;
  EXPECT_NE(message.find("not a regular file"), std::string::npos) << message;
}

// ---------------------------------------------------------------------------- malformed files

struct MalformedCase {
  std::string label;
  std::string header;
  size_t data_size;
  std::string tensor;  // "" where the problem is not about one tensor
  std::string phrase;  // part of the expected message
};

void PrintTo(const MalformedCase& c, std::ostream* os) { *os << c.label; }

class SafetensorsMalformed : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(SafetensorsMalformed, ThrowsNamingFileAndTensor) {
  const MalformedCase& c = GetParam();
  TempDir dir;
  const std::string path = dir.file(c.label + ".safetensors");
  write_bytes(path, safetensors_bytes(c.header, pattern_bytes(c.data_size, 3)));
  const std::string message = error_message([&] { SafetensorsFile::open(path); });
  EXPECT_NE(message.find("'" + path + "'"), std::string::npos) << message;
  if (!c.tensor.empty()) {
    EXPECT_NE(message.find("'" + c.tensor + "'"), std::string::npos) << message;
  }
  EXPECT_NE(message.find(c.phrase), std::string::npos) << message;
}

#define W(fields) std::string(R"({"w":{)") + fields + "}}"
const MalformedCase kMalformedCases[] = {
    {"not_json", "{not json", 0, "", "invalid JSON"},
    {"empty_header", "", 0, "", "invalid JSON"},
    {"trailing_garbage", R"({} x)", 0, "", "invalid JSON"},
    {"invalid_utf8", "{\"w\xff\":{}}", 0, "", "invalid JSON"},
    {"array_header", "[1, 2]", 0, "", "must be a JSON object"},
    {"string_header", R"("w")", 0, "", "must be a JSON object"},
    {"entry_not_object", R"({"w": [1]})", 0, "w", "must be a JSON object"},
    {"missing_dtype", W(R"("shape":[1],"data_offsets":[0,4])"), 4, "w", "missing 'dtype'"},
    {"dtype_not_string", W(R"("dtype":4,"shape":[1],"data_offsets":[0,4])"), 4, "w",
     "'dtype' must be a string"},
    {"unknown_dtype", W(R"("dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1])"), 1, "w",
     "unknown or unsupported dtype 'F8_E4M3'"},
    {"lowercase_dtype", W(R"("dtype":"f32","shape":[1],"data_offsets":[0,4])"), 4, "w",
     "dtype 'f32'"},
    {"missing_shape", W(R"("dtype":"F32","data_offsets":[0,4])"), 4, "w", "missing 'shape'"},
    {"shape_not_array", W(R"("dtype":"F32","shape":1,"data_offsets":[0,4])"), 4, "w",
     "'shape' must be an array"},
    {"shape_float", W(R"("dtype":"F32","shape":[1.0],"data_offsets":[0,4])"), 4, "w",
     "non-negative integers"},
    {"shape_string", W(R"("dtype":"F32","shape":["1"],"data_offsets":[0,4])"), 4, "w",
     "non-negative integers"},
    {"negative_dim", W(R"("dtype":"F32","shape":[-1,4],"data_offsets":[0,4])"), 4, "w",
     "negative dimension -1"},
    {"dim_too_large", W(R"("dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,4])"), 4,
     "w", "too large"},
    {"dim_beyond_u64", W(R"("dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,4])"), 4,
     "w", "non-negative integers"},
    {"element_count_overflow",
     W(R"("dtype":"U8","shape":[4294967296,4294967296,4],"data_offsets":[0,4])"), 4, "w",
     "overflows"},
    {"byte_size_overflow", W(R"("dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,4])"),
     4, "w", "overflows"},
    {"missing_offsets", W(R"("dtype":"F32","shape":[1])"), 4, "w", "missing 'data_offsets'"},
    {"offsets_not_array", W(R"("dtype":"F32","shape":[1],"data_offsets":4)"), 4, "w",
     "'data_offsets' must be [begin, end]"},
    {"offsets_one_value", W(R"("dtype":"F32","shape":[1],"data_offsets":[4])"), 4, "w",
     "'data_offsets' must be [begin, end]"},
    {"offsets_three_values", W(R"("dtype":"F32","shape":[1],"data_offsets":[0,4,8])"), 8, "w",
     "'data_offsets' must be [begin, end]"},
    {"offsets_negative", W(R"("dtype":"F32","shape":[1],"data_offsets":[-4,0])"), 4, "w",
     "'data_offsets' must be [begin, end]"},
    {"offsets_float", W(R"("dtype":"F32","shape":[1],"data_offsets":[0,4.0])"), 4, "w",
     "'data_offsets' must be [begin, end]"},
    {"begin_after_end", W(R"("dtype":"F32","shape":[0],"data_offsets":[8,4])"), 8, "w",
     "begin after end"},
    {"end_past_data", W(R"("dtype":"F32","shape":[2],"data_offsets":[0,8])"), 4, "w",
     "past the data section of 4 bytes"},
    {"offsets_huge",
     W(R"("dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615])"), 4,
     "w", "past the data section"},
    {"byte_size_mismatch", W(R"("dtype":"F32","shape":[2],"data_offsets":[0,4])"), 8, "w",
     "holds 4 bytes but F32 [2] needs 8"},
    {"scalar_size_mismatch", W(R"("dtype":"F64","shape":[],"data_offsets":[0,4])"), 8, "w",
     "needs 8"},
    {"overlap",
     R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
     R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
     12, "b", "overlap"},
    {"overlap_nested",
     R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
     R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
     R"("c":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
     8, "a", "overlap"},
    {"same_range",
     R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
     R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
     4, "a", "overlap"},
    {"duplicate_name",
     R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
     R"("w":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
     4, "w", "appears twice"},
    {"metadata_not_object", R"({"__metadata__":[1]})", 0, "", "'__metadata__' must be an object"},
    {"metadata_value_not_string", R"({"__metadata__":{"step":1}})", 0, "step", "must be a string"},
    {"deep_header", std::string(100000, '[') + std::string(100000, ']'), 0, "", "deeper than"},
    {"deep_object_header", testing::nested_json('{'), 0, "", "deeper than"},
    {"deep_entry", R"({"w":)" + std::string(100000, '[') + std::string(100000, ']') + "}", 0, "",
     "deeper than"},
    {"deep_shape",
     W(R"("dtype":"F32","data_offsets":[0,0],"shape":)" + std::string(100000, '[') +
       std::string(100000, ']')),
     0, "", "deeper than"},
    {"deep_metadata_value",
     R"({"__metadata__":{"k":)" + std::string(100000, '[') + std::string(100000, ']') + "}}", 0, "",
     "deeper than"},
};
#undef W

INSTANTIATE_TEST_SUITE_P(AllCases, SafetensorsMalformed, ::testing::ValuesIn(kMalformedCases),
                         [](const auto& info) { return info.param.label; });

TEST(SafetensorsMalformedLength, FileShorterThanLengthField) {
  TempDir dir;
  for (size_t size : {0, 1, 7}) {
    const std::string path = dir.file("short" + std::to_string(size));
    write_bytes(path, Bytes(size, 0));
    const std::string message = error_message([&] { SafetensorsFile::open(path); });
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("shorter than the 8-byte header length"), std::string::npos) << message;
  }
}

TEST(SafetensorsMalformedLength, HeaderLengthPastEndOfFile) {
  TempDir dir;
  const std::string path = dir.file("long.safetensors");
  for (uint64_t length : {uint64_t{3}, uint64_t{1} << 40, ~uint64_t{0}, ~uint64_t{0} - 7}) {
    Bytes bytes = u64_le(length);
    bytes.push_back('{');
    bytes.push_back('}');
    write_bytes(path, bytes);
    const std::string message = error_message([&] { SafetensorsFile::open(path); });
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("header length " + std::to_string(length) + " runs past the end"),
              std::string::npos)
        << message;
  }
}

TEST(SafetensorsMalformedLength, EveryTruncationOfAValidFileIsRejected) {
  TempDir dir;
  const std::string valid = dir.file("valid.safetensors");
  write_safetensors(
      valid,
      views_of({make_tensor("a", DType::F32, {3}, 1), make_tensor("b", DType::BF16, {5}, 2),
                make_tensor("c", DType::U8, {}, 3)}),
      {{"format", "pt"}});
  const Bytes bytes = read_bytes(valid);
  const std::string path = dir.file("cut.safetensors");
  for (size_t size = 0; size < bytes.size(); ++size) {
    write_bytes(path, Bytes(bytes.begin(), bytes.begin() + size));
    const std::string message = error_message([&] { SafetensorsFile::open(path); });
    EXPECT_NE(message.find(path), std::string::npos) << "cut at " << size << ": " << message;
  }
}

// ---------------------------------------------------------------------------- accepted oddities

TEST(SafetensorsLenient, HolesZeroSizeTensorsAndUnknownFieldsAreAccepted) {
  TempDir dir;
  const std::string path = dir.file("odd.safetensors");
  // A hole at [4, 6), two zero-size tensors (one inside another tensor's range), unordered JSON,
  // an unknown field, null metadata and trailing header padding.
  const std::string header =
      R"({"z":{"dtype":"U8","shape":[2],"data_offsets":[6,8],"extra":true},)"
      R"("e1":{"dtype":"F32","shape":[0,3],"data_offsets":[7,7]},)"
      R"("e0":{"dtype":"I64","shape":[0],"data_offsets":[0,0]},)"
      R"("a":{"dtype":"I16","shape":[2],"data_offsets":[0,4]},"__metadata__":null}      )";
  const Bytes data = pattern_bytes(8, 40);
  write_bytes(path, safetensors_bytes(header, data));
  SafetensorsFile file = SafetensorsFile::open(path);
  std::vector<std::string> order;
  for (const TensorInfo& info : file.tensors()) order.push_back(info.name);
  EXPECT_EQ(order, (std::vector<std::string>{"e0", "a", "z", "e1"}));
  EXPECT_TRUE(file.metadata().empty());
  EXPECT_EQ(tensor_bytes(file, file.at("a")), Bytes(data.begin(), data.begin() + 4));
  EXPECT_EQ(tensor_bytes(file, file.at("z")), Bytes(data.begin() + 6, data.end()));
  EXPECT_TRUE(tensor_bytes(file, file.at("e1")).empty());
}

// Random damage to a valid file: opening must either succeed or throw finetune::Error, and every
// tensor handed out must lie inside the file.
TEST(SafetensorsFuzz, RandomDamageNeverCrashes) {
  TempDir dir;
  const std::string valid = dir.file("valid.safetensors");
  write_safetensors(valid,
                    views_of({make_tensor("model.a", DType::F32, {3, 2}, 1),
                              make_tensor("model.b", DType::BF16, {5}, 2),
                              make_tensor("model.c", DType::BOOL, {}, 3),
                              make_tensor("model.d", DType::I64, {0}, 4)}),
                    {{"format", "pt"}});
  const Bytes original = read_bytes(valid);
  const std::string path = dir.file("damaged.safetensors");
  std::mt19937 rng(20240601);
  int opened = 0;
  for (int round = 0; round < 1000; ++round) {
    Bytes bytes = original;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 4) {
        case 0:
          bytes[at] = static_cast<uint8_t>(rng());
          break;
        case 1:
          bytes[at] = "0123456789[]{}\",:-"[rng() % 18];
          break;
        case 2:
          bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(at));
          break;
        default:
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                       static_cast<uint8_t>(rng()));
          break;
      }
      if (bytes.empty()) break;
    }
    write_bytes(path, bytes);
    try {
      SafetensorsFile file = SafetensorsFile::open(path);
      ++opened;
      uint64_t header_length = 0;
      std::memcpy(&header_length, bytes.data(), 8);  // the test host is little-endian
      for (const TensorInfo& info : file.tensors()) {
        ASSERT_LE(info.begin, info.end);
        ASSERT_LE(8 + header_length + info.end, bytes.size()) << info.name;
        const auto* data = static_cast<const uint8_t*>(file.data(info));
        volatile uint8_t sum = 0;
        for (uint64_t i = 0; i < info.end - info.begin; ++i) sum = sum + data[i];
      }
    } catch (const Error&) {
      // refused with a finetune::Error: fine
    }
  }
  EXPECT_GT(opened, 0);  // some damage (e.g. inside tensor bytes) leaves a valid file
}

}  // namespace
}  // namespace finetune
