// The GGUF v3 container, format only (llama.cpp's gguf-py GGUFWriter layout): magic "GGUF",
// version 3, tensor and KV counts, the KV pairs in insertion order, the tensor infos (name,
// dimensions innermost first, ggml type, offset), zero padding to the 32-byte alignment, then
// each tensor's bytes padded to 32. What the keys and tensors mean is gguf_export's business.
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

// Streams a GGUF file to disk: the KV pairs and the tensor infos (name, shape, type, byte count)
// are declared first, so every tensor's offset is known; begin() writes the header into a
// temporary file beside the path, write_tensor_data() writes a tensor's bytes at their place (in
// any order, a tensor in pieces), finish() checks that every tensor was written whole, fsyncs and
// renames. Only one piece of tensor data is ever in memory. A writer destroyed before finish()
// removes its temporary file: the path appears whole or not at all.
class GgufFileWriter {
 public:
  GgufFileWriter() = default;
  GgufFileWriter(const GgufFileWriter&) = delete;
  GgufFileWriter& operator=(const GgufFileWriter&) = delete;
  ~GgufFileWriter();

  void add_uint32(const std::string& key, uint32_t value);
  void add_int32(const std::string& key, int32_t value);
  void add_float32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_string(const std::string& key, const std::string& value);
  void add_string_array(const std::string& key, const std::vector<std::string>& values);
  void add_int32_array(const std::string& key, const std::vector<int32_t>& values);
  void add_float32_array(const std::string& key, const std::vector<float>& values);

  // Declares a tensor: `shape` in PyTorch order (outermost first; GGUF stores it reversed),
  // `byte_count` its data encoded as `ggml_type`. Names are unique (an Error otherwise). Returns
  // the tensor's index for write_tensor_data.
  size_t add_tensor_info(const std::string& name, const std::vector<int64_t>& shape, uint32_t ggml_type,
                         uint64_t byte_count);

  bool has_key(const std::string& key) const;
  size_t tensor_count() const { return tensors_.size(); }

  // Creates `path`'s temporary file and writes the header; no key or tensor may be added after.
  void begin(const std::string& path);
  // Writes `size` bytes of tensor `index`'s data starting `offset` bytes into it; an Error when
  // they would run past the declared byte count.
  void write_tensor_data(size_t index, uint64_t offset, const void* data, size_t size);
  // Every tensor written whole (an Error naming the first that is not), fsync, rename into place.
  void finish();

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    uint32_t type;
    uint64_t byte_count;
    uint64_t offset;   // within the data section
    uint64_t written;  // bytes written so far
  };
  void begin_key(const std::string& key, GgufValueType type);
  void check_not_begun(const std::string& what) const;
  void write_at(uint64_t position, const void* data, size_t size);
  std::string kv_;  // encoded KV pairs
  std::vector<std::string> keys_;
  std::vector<Tensor> tensors_;
  uint64_t data_bytes_ = 0;  // the data section's size so far, padded
  std::string path_, tmp_path_;
  uint64_t data_start_ = 0;
  int fd_ = -1;
};

}  // namespace finetune
