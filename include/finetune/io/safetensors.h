// safetensors reader and writer (https://huggingface.co/docs/safetensors), LibTorch-free.
//
// File layout: 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section; offsets are relative to the data section's start.
// Reading memory-maps the file and validates everything before any tensor is handed out:
// header length past end of file, malformed JSON, unknown dtype, offsets out of range or
// overlapping, byte size not matching dtype x shape. Errors name the file and the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace finetune {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

size_t dtype_size(DType dtype);
std::string dtype_name(DType dtype);  // safetensors spelling: "F32", "BF16", ...
DType dtype_from_name(const std::string& name, const std::string& context);

// Number of elements of `shape` (1 for a scalar, shape []); throws on a negative dimension or
// 64-bit overflow.
int64_t element_count(const std::vector<int64_t>& shape);
std::string shape_to_string(const std::vector<int64_t>& shape);  // "[2, 3]", for messages

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets within the data section
  uint64_t end = 0;
};

// A memory-mapped, validated safetensors file. Move-only; unmaps on destruction.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // In file order: ascending data offset (ties, i.e. zero-size tensors, by name).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;              // nullptr if absent
  const TensorInfo& at(const std::string& name) const;                // throws naming file+tensor
  // Start of the tensor's bytes (end - begin of them), valid while this file lives. Throws if
  // `info` is not one of this file's tensors.
  const void* data(const TensorInfo& info) const;
  // Gives back the memory of this process's mapped pages under [data, data + size), a range
  // within the mapping (say a tensor's bytes, once copied): rounded out to whole pages, so a
  // neighbour's pages may go too. The bytes stay readable; a later read maps them in again from
  // the file. Loading a model through the mapping would otherwise hold every tensor's pages
  // besides the model's own copy until the file closes. Best effort: a refused madvise changes
  // nothing. Throws if the range is not within this file.
  void release_pages(const void* data, size_t size) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  const uint8_t* data_section_ = nullptr;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: raw little-endian bytes in `dtype` with `shape`.
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
};

// A tensor to write whose bytes are made when the writer reaches it, so that writing a file holds
// one tensor's bytes at a time: `data` returns dtype x shape bytes (kept alive by the returned
// pointer's owner until written; null only when there are none). Called once.
struct TensorSource {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::function<std::shared_ptr<const void>()> data;
};

// Writes atomically: to `path + ".tmp.<pid>"`, fsync, then rename, so a crash never leaves a
// half-written file at `path`. The header lists tensors in name order; in the data section they
// are laid out like the Python library does (larger dtypes first, then by name, no gaps), which
// keeps every tensor aligned to its element size. Throws naming the file (and tensor) on
// duplicate or reserved names, negative dimensions, or null data with a nonzero size.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The same file from tensors whose bytes are made one at a time, in the data section's order.
void write_safetensors_streamed(const std::string& path, const std::vector<TensorSource>& tensors,
                                const std::map<std::string, std::string>& metadata = {});

// The weights of a model directory: `model.safetensors`, or the shards listed by
// `model.safetensors.index.json` ("weight_map": {tensor name: shard file}).
class CheckpointFiles {
 public:
  static CheckpointFiles open_dir(const std::string& model_dir);

  std::vector<std::string> tensor_names() const;  // sorted
  bool contains(const std::string& name) const;
  const SafetensorsFile& file_of(const std::string& name) const;  // throws naming dir+tensor
  const TensorInfo& info(const std::string& name) const;
  const std::string& dir() const { return dir_; }
  // The opened files (one, or one per shard in shard-name order), e.g. to read them in order.
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> file_of_tensor_;
};

}  // namespace finetune
