#include "finetune/gguf/gguf_file_writer.h"

#include <algorithm>
#include <cstring>

#include "finetune/util/atomic_file.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// GGUF is little-endian; so is every host we build for.
template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_string(std::string& out, const std::string& value) {
  put<uint64_t>(out, value.size());
  out += value;
}

uint64_t aligned(uint64_t offset) { return (offset + kGgufAlignment - 1) / kGgufAlignment * kGgufAlignment; }

}  // namespace

void GgufFileWriter::begin_key(const std::string& key, GgufValueType type) {
  if (has_key(key)) throw Error("GGUF: duplicate key '" + key + "'");
  keys_.push_back(key);
  put_string(kv_, key);
  put<uint32_t>(kv_, static_cast<uint32_t>(type));
}

bool GgufFileWriter::has_key(const std::string& key) const {
  return std::find(keys_.begin(), keys_.end(), key) != keys_.end();
}

void GgufFileWriter::add_uint32(const std::string& key, uint32_t value) {
  begin_key(key, GgufValueType::kUint32);
  put(kv_, value);
}

void GgufFileWriter::add_int32(const std::string& key, int32_t value) {
  begin_key(key, GgufValueType::kInt32);
  put(kv_, value);
}

void GgufFileWriter::add_float32(const std::string& key, float value) {
  begin_key(key, GgufValueType::kFloat32);
  put(kv_, value);
}

void GgufFileWriter::add_bool(const std::string& key, bool value) {
  begin_key(key, GgufValueType::kBool);
  put<uint8_t>(kv_, value ? 1 : 0);
}

void GgufFileWriter::add_string(const std::string& key, const std::string& value) {
  begin_key(key, GgufValueType::kString);
  put_string(kv_, value);
}

void GgufFileWriter::add_string_array(const std::string& key, const std::vector<std::string>& values) {
  begin_key(key, GgufValueType::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(GgufValueType::kString));
  put<uint64_t>(kv_, values.size());
  for (const auto& value : values) put_string(kv_, value);
}

void GgufFileWriter::add_int32_array(const std::string& key, const std::vector<int32_t>& values) {
  begin_key(key, GgufValueType::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(GgufValueType::kInt32));
  put<uint64_t>(kv_, values.size());
  for (int32_t value : values) put(kv_, value);
}

void GgufFileWriter::add_float32_array(const std::string& key, const std::vector<float>& values) {
  begin_key(key, GgufValueType::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(GgufValueType::kFloat32));
  put<uint64_t>(kv_, values.size());
  for (float value : values) put(kv_, value);
}

void GgufFileWriter::add_tensor(const std::string& name, const std::vector<int64_t>& shape, uint32_t ggml_type,
                                std::string bytes) {
  for (const auto& tensor : tensors_) {
    if (tensor.name == name) throw Error("GGUF: duplicate tensor '" + name + "'");
  }
  tensors_.push_back({name, shape, ggml_type, std::move(bytes)});
}

void GgufFileWriter::write(const std::string& path) const {
  std::string header;
  put<uint32_t>(header, 0x46554747);  // "GGUF"
  put<uint32_t>(header, kGgufVersion);
  put<uint64_t>(header, tensors_.size());
  put<uint64_t>(header, keys_.size());
  header += kv_;
  uint64_t offset = 0;
  for (const auto& tensor : tensors_) {
    put_string(header, tensor.name);
    put<uint32_t>(header, static_cast<uint32_t>(tensor.shape.size()));
    for (auto it = tensor.shape.rbegin(); it != tensor.shape.rend(); ++it) put<uint64_t>(header, *it);
    put<uint32_t>(header, tensor.type);
    put<uint64_t>(header, offset);
    offset = aligned(offset + tensor.bytes.size());
  }
  header.resize(aligned(header.size()), '\0');

  static const char kZeros[kGgufAlignment] = {};
  std::vector<std::pair<const void*, size_t>> parts = {{header.data(), header.size()}};
  for (const auto& tensor : tensors_) {
    parts.emplace_back(tensor.bytes.data(), tensor.bytes.size());
    const size_t padding = aligned(tensor.bytes.size()) - tensor.bytes.size();
    if (padding > 0) parts.emplace_back(kZeros, padding);
  }
  write_parts_atomically(path, parts);
}

}  // namespace finetune
