// The reader against the Python safetensors library: files written by safetensors.numpy /
// safetensors.torch and a transformers-style sharded checkpoint must read back byte for byte as
// the library reads them, and damaged files the library refuses must be refused here too.
// Fixtures: tests/reference/make_io_fixtures.py, found at $FINETUNE_FIXTURES/io.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "finetune/io/safetensors.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using nlohmann::json;

std::string fixtures_dir() {
  const char* root = std::getenv("FINETUNE_FIXTURES");
  if (root == nullptr || *root == '\0') {
    throw std::runtime_error(
        "FINETUNE_FIXTURES is not set: run tests/reference/make_io_fixtures.py "
        "$FINETUNE_FIXTURES/io first (scripts/test.sh does)");
  }
  const std::string dir = std::string(root) + "/io";
  if (!std::filesystem::is_regular_file(dir + "/expected.json")) {
    throw std::runtime_error("missing " + dir +
                             "/expected.json: run tests/reference/make_io_fixtures.py " + dir);
  }
  return dir;
}

json load_expected(const std::string& dir) {
  std::ifstream in(dir + "/expected.json");
  return json::parse(in);
}

std::string to_hex(const uint8_t* data, size_t size) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (size_t i = 0; i < size; ++i) {
    hex += digits[data[i] >> 4];
    hex += digits[data[i] & 15];
  }
  return hex;
}

template <typename T>
T load(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

double half_to_double(uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(mantissa + 1024, exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

double bfloat16_to_double(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  return load<float>(reinterpret_cast<const uint8_t*>(&widened));
}

// Element i of a little-endian tensor as a double, the way torch's .to(float64) converts it.
double element_as_double(DType dtype, const uint8_t* data, size_t i) {
  const uint8_t* p = data + i * dtype_size(dtype);
  switch (dtype) {
    case DType::F64:
      return load<double>(p);
    case DType::F32:
      return load<float>(p);
    case DType::F16:
      return half_to_double(load<uint16_t>(p));
    case DType::BF16:
      return bfloat16_to_double(load<uint16_t>(p));
    case DType::I64:
      return static_cast<double>(load<int64_t>(p));
    case DType::I32:
      return load<int32_t>(p);
    case DType::I16:
      return load<int16_t>(p);
    case DType::I8:
      return load<int8_t>(p);
    case DType::U8:
      return *p;
    case DType::BOOL:
      return *p != 0 ? 1.0 : 0.0;
  }
  return NAN;
}

void expect_file_matches(const SafetensorsFile& file, const json& expected) {
  using StringMap = std::map<std::string, std::string>;
  EXPECT_EQ(file.metadata(), expected.at("metadata").get<StringMap>());
  ASSERT_EQ(file.tensors().size(), expected.at("tensors").size());
  for (const auto& [name, want] : expected.at("tensors").items()) {
    SCOPED_TRACE(file.path() + ": " + name);
    const TensorInfo& info = file.at(name);
    EXPECT_EQ(dtype_name(info.dtype), want.at("dtype").get<std::string>());
    EXPECT_EQ(info.shape, want.at("shape").get<std::vector<int64_t>>());
    EXPECT_EQ(info.begin, want.at("data_offsets")[0].get<uint64_t>());
    EXPECT_EQ(info.end, want.at("data_offsets")[1].get<uint64_t>());
    const auto* data = static_cast<const uint8_t*>(file.data(info));
    EXPECT_EQ(to_hex(data, info.end - info.begin), want.at("hex").get<std::string>());
    const auto values = want.at("values").get<std::vector<double>>();
    ASSERT_EQ(static_cast<int64_t>(values.size()), element_count(info.shape));
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(element_as_double(info.dtype, data, i), values[i]) << "element " << i;
    }
  }
}

TEST(SafetensorsReference, FilesWrittenByPythonReadBackExactly) {
  const std::string dir = fixtures_dir();
  const json expected = load_expected(dir);
  ASSERT_GE(expected.at("files").size(), 3u);
  std::set<std::string> dtypes_seen;
  for (const auto& [relative, want] : expected.at("files").items()) {
    const SafetensorsFile file = SafetensorsFile::open(dir + "/" + relative);
    expect_file_matches(file, want);
    for (const TensorInfo& info : file.tensors()) dtypes_seen.insert(dtype_name(info.dtype));
  }
  EXPECT_EQ(dtypes_seen.size(), 10u) << "the fixtures should cover every dtype";
}

TEST(SafetensorsReference, ShardedCheckpointAsTransformersWritesIt) {
  const std::string dir = fixtures_dir();
  const json expected = load_expected(dir);
  const std::string model_dir = dir + "/" + expected.at("sharded").at("dir").get<std::string>();
  const auto weight_map =
      expected.at("sharded").at("weight_map").get<std::map<std::string, std::string>>();
  const CheckpointFiles checkpoint = CheckpointFiles::open_dir(model_dir);

  std::vector<std::string> names;
  for (const auto& entry : weight_map) names.push_back(entry.first);
  EXPECT_EQ(checkpoint.tensor_names(), names);
  for (const auto& [name, shard] : weight_map) {
    EXPECT_EQ(checkpoint.file_of(name).path(), model_dir + "/" + shard) << name;
    const json& want = expected.at("files").at("sharded/" + shard).at("tensors").at(name);
    const TensorInfo& info = checkpoint.info(name);
    EXPECT_EQ(info.shape, want.at("shape").get<std::vector<int64_t>>()) << name;
    const auto* data = static_cast<const uint8_t*>(checkpoint.file_of(name).data(info));
    EXPECT_EQ(to_hex(data, info.end - info.begin), want.at("hex").get<std::string>()) << name;
  }
}

TEST(SafetensorsReference, FilesPythonRejectsAreRejected) {
  const std::string dir = fixtures_dir();
  const auto rejected = load_expected(dir).at("rejected").get<std::vector<std::string>>();
  ASSERT_GE(rejected.size(), 5u);
  for (const std::string& name : rejected) {
    const std::string path = dir + "/rejected/" + name + ".safetensors";
    try {
      SafetensorsFile::open(path);
      ADD_FAILURE() << name << ": opened a file the Python library refuses";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace finetune
