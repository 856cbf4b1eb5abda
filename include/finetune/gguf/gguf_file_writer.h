// The GGUF v3 container, format only (llama.cpp's gguf-py GGUFWriter layout): magic "GGUF",
// version 3, tensor and KV counts, the KV pairs in insertion order, the tensor infos (name,
// dimensions innermost first, ggml type, offset), zero padding to the 32-byte alignment, then
// each tensor's bytes padded to 32. The file is written beside its path, fsynced and renamed.
// What the keys and tensors mean is gguf_export's business.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace finetune {

// GGUF metadata value types (gguf-py constants.GGUFValueType).
enum class GgufValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};

inline constexpr uint32_t kGgufVersion = 3;
inline constexpr uint64_t kGgufAlignment = 32;

class GgufFileWriter {
 public:
  void add_uint32(const std::string& key, uint32_t value);
  void add_int32(const std::string& key, int32_t value);
  void add_float32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_string(const std::string& key, const std::string& value);
  void add_string_array(const std::string& key, const std::vector<std::string>& values);
  void add_int32_array(const std::string& key, const std::vector<int32_t>& values);
  void add_float32_array(const std::string& key, const std::vector<float>& values);

  // `shape` in PyTorch order (outermost first); GGUF stores it reversed. `bytes` is the tensor's
  // data already encoded as `ggml_type`. Names are unique (an Error otherwise).
  void add_tensor(const std::string& name, const std::vector<int64_t>& shape, uint32_t ggml_type,
                  std::string bytes);

  bool has_key(const std::string& key) const;
  size_t tensor_count() const { return tensors_.size(); }

  // Writes the whole file atomically; errors name `path`.
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    uint32_t type;
    std::string bytes;
  };
  void begin_key(const std::string& key, GgufValueType type);
  std::string kv_;  // encoded KV pairs
  std::vector<std::string> keys_;
  std::vector<Tensor> tensors_;
};

}  // namespace finetune
