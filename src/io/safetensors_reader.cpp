// SafetensorsFile: memory-maps a safetensors file and validates its header before handing out
// any tensor. Every check that fails throws finetune::Error naming the file (and the tensor).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "finetune/io/safetensors.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"

namespace finetune {

namespace {

using nlohmann::json;

constexpr const char* kMetadataKey = "__metadata__";
constexpr size_t kHeaderLengthBytes = 8;

std::string file_context(const std::string& path) { return "safetensors file '" + path + "'"; }

std::string tensor_context(const std::string& path, const std::string& name) {
  return file_context(path) + ": tensor '" + name + "'";
}

uint64_t read_u64_le(const uint8_t* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

std::vector<int64_t> parse_shape(const json& shape, const std::string& context) {
  if (!shape.is_array()) {
    throw Error(context + ": 'shape' must be an array of non-negative integers, got " +
                json_excerpt(shape));
  }
  std::vector<int64_t> dims;
  dims.reserve(shape.size());
  for (const json& dim : shape) {
    if (dim.is_number_integer() && !dim.is_number_unsigned()) {
      throw Error(context + ": negative dimension " + json_excerpt(dim) + " in 'shape' " +
                  json_excerpt(shape));
    }
    if (!dim.is_number_unsigned()) {
      throw Error(context + ": 'shape' entries must be non-negative integers, got " + json_excerpt(dim));
    }
    uint64_t value = dim.get<uint64_t>();
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw Error(context + ": dimension " + json_excerpt(dim) + " in 'shape' is too large");
    }
    dims.push_back(static_cast<int64_t>(value));
  }
  return dims;
}

std::pair<uint64_t, uint64_t> parse_data_offsets(const json& offsets, const std::string& context) {
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    throw Error(context + ": 'data_offsets' must be [begin, end] with non-negative integers, got " +
                json_excerpt(offsets));
  }
  return {offsets[0].get<uint64_t>(), offsets[1].get<uint64_t>()};
}

const json& required_field(const json& entry, const char* field, const std::string& context) {
  auto it = entry.find(field);
  if (it == entry.end()) throw Error(context + ": missing '" + field + "'");
  return *it;
}

TensorInfo parse_tensor_entry(const std::string& name, const json& entry, uint64_t data_size,
                              const std::string& path) {
  const std::string context = tensor_context(path, name);
  if (!entry.is_object())
    throw Error(context + ": entry must be a JSON object, got " + json_excerpt(entry));

  const json& dtype = required_field(entry, "dtype", context);
  if (!dtype.is_string())
    throw Error(context + ": 'dtype' must be a string, got " + json_excerpt(dtype));

  TensorInfo info;
  info.name = name;
  info.dtype = dtype_from_name(dtype.get<std::string>(), context);
  info.shape = parse_shape(required_field(entry, "shape", context), context);
  std::tie(info.begin, info.end) =
      parse_data_offsets(required_field(entry, "data_offsets", context), context);

  if (info.begin > info.end) {
    throw Error(context + ": data_offsets [" + std::to_string(info.begin) + ", " +
                std::to_string(info.end) + "] begin after end");
  }
  if (info.end > data_size) {
    throw Error(context + ": data_offsets [" + std::to_string(info.begin) + ", " +
                std::to_string(info.end) + "] run past the data section of " +
                std::to_string(data_size) + " bytes (file truncated?)");
  }
  int64_t count = 0;
  uint64_t expected_bytes = 0;
  try {
    count = element_count(info.shape);
  } catch (const Error& e) {
    throw Error(context + ": " + e.what());
  }
  if (__builtin_mul_overflow(static_cast<uint64_t>(count), dtype_size(info.dtype),
                             &expected_bytes)) {
    throw Error(context + ": byte size of shape " + shape_to_string(info.shape) +
                " overflows 64 bits");
  }
  if (info.end - info.begin != expected_bytes) {
    throw Error(context + ": holds " + std::to_string(info.end - info.begin) + " bytes but " +
                dtype_name(info.dtype) + " " + shape_to_string(info.shape) + " needs " +
                std::to_string(expected_bytes));
  }
  return info;
}

std::map<std::string, std::string> parse_metadata(const json& metadata, const std::string& path) {
  const std::string context = file_context(path) + ": '__metadata__'";
  std::map<std::string, std::string> result;
  if (metadata.is_null()) return result;  // the Python library accepts null as "no metadata"
  if (!metadata.is_object()) {
    throw Error(context + " must be an object of strings, got " + json_excerpt(metadata));
  }
  for (const auto& [key, value] : metadata.items()) {
    if (!value.is_string()) {
      throw Error(context + ": value of '" + key + "' must be a string, got " + json_excerpt(value));
    }
    result.emplace(key, value.get<std::string>());
  }
  return result;
}

// Zero-size tensors occupy no bytes and so overlap nothing; holes between tensors are allowed.
void check_no_overlaps(const std::vector<TensorInfo>& tensors, const std::string& path) {
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& info : tensors) {  // sorted by begin
    if (info.begin == info.end) continue;
    if (previous != nullptr && info.begin < previous->end) {
      throw Error(file_context(path) + ": tensors '" + previous->name + "' [" +
                  std::to_string(previous->begin) + ", " + std::to_string(previous->end) +
                  ") and '" + info.name + "' [" + std::to_string(info.begin) + ", " +
                  std::to_string(info.end) + ") overlap");
    }
    if (previous == nullptr || info.end > previous->end) previous = &info;
  }
}

struct ParsedHeader {
  std::vector<TensorInfo> tensors;  // sorted by (begin, end, name)
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;
};

json parse_header_json(const char* first, const char* last, const std::string& path) {
  // nlohmann keeps the last of duplicate keys; a duplicated tensor name is ambiguous, so reject it.
  std::optional<std::string> duplicate;
  std::set<std::string> top_level_keys;
  auto on_key = [&](int depth, const std::string& key) {
    if (depth == 1 && !top_level_keys.insert(key).second && !duplicate) duplicate = key;
  };
  json header = parse_json(std::string_view(first, last - first), file_context(path) + " header", on_key);
  if (!header.is_object()) {
    throw Error(file_context(path) + ": header must be a JSON object, got " +
                std::string(header.type_name()));
  }
  if (duplicate) throw Error(tensor_context(path, *duplicate) + ": appears twice in the header");
  return header;
}

void check_holds_header_length(uint64_t file_size, const std::string& path) {
  if (file_size < kHeaderLengthBytes) {
    throw Error(file_context(path) + ": file is " + std::to_string(file_size) +
                " bytes, shorter than the 8-byte header length");
  }
}

ParsedHeader parse_header(const uint8_t* bytes, uint64_t file_size, const std::string& path) {
  check_holds_header_length(file_size, path);
  const uint64_t header_length = read_u64_le(bytes);
  if (header_length > file_size - kHeaderLengthBytes) {
    throw Error(file_context(path) + ": header length " + std::to_string(header_length) +
                " runs past the end of the file (" + std::to_string(file_size) +
                " bytes, leaving " + std::to_string(file_size - kHeaderLengthBytes) +
                " after the length field)");
  }
  const char* header_begin = reinterpret_cast<const char*>(bytes + kHeaderLengthBytes);
  json header = parse_header_json(header_begin, header_begin + header_length, path);

  ParsedHeader parsed;
  parsed.data_start = kHeaderLengthBytes + header_length;
  const uint64_t data_size = file_size - parsed.data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      parsed.metadata = parse_metadata(entry, path);
    } else {
      parsed.tensors.push_back(parse_tensor_entry(name, entry, data_size, path));
    }
  }
  std::sort(parsed.tensors.begin(), parsed.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  check_no_overlaps(parsed.tensors, path);
  return parsed;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open " + file_context(path) + ": " + errno_text());
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    const std::string reason = errno_text();
    ::close(fd);
    throw Error("cannot stat " + file_context(path) + ": " + reason);
  }
  if (!S_ISREG(status.st_mode)) {
    ::close(fd);
    throw Error(file_context(path) + ": not a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(status.st_size);
  if (file_size < kHeaderLengthBytes) {
    ::close(fd);
    check_holds_header_length(file_size, path);
  }
  // Mapped, not read: opening a multi-GB checkpoint touches only its header pages.
  void* mapping = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string map_reason = mapping == MAP_FAILED ? errno_text() : "";
  ::close(fd);  // the mapping keeps the file alive
  if (mapping == MAP_FAILED) throw Error("cannot mmap " + file_context(path) + ": " + map_reason);
  file.mapping_ = mapping;  // from here on, ~SafetensorsFile unmaps even if validation throws
  file.mapping_size_ = file_size;

  const auto* bytes = static_cast<const uint8_t*>(mapping);
  ParsedHeader parsed = parse_header(bytes, file_size, path);
  file.data_section_ = bytes + parsed.data_start;
  file.tensors_ = std::move(parsed.tensors);
  file.metadata_ = std::move(parsed.metadata);
  for (size_t i = 0; i < file.tensors_.size(); ++i) file.index_.emplace(file.tensors_[i].name, i);
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this == &other) return *this;
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
  path_ = std::move(other.path_);
  mapping_ = std::exchange(other.mapping_, nullptr);
  mapping_size_ = std::exchange(other.mapping_size_, 0);
  data_section_ = std::exchange(other.data_section_, nullptr);
  tensors_ = std::move(other.tensors_);
  index_ = std::move(other.index_);
  metadata_ = std::move(other.metadata_);
  other.tensors_.clear();
  other.index_.clear();
  other.metadata_.clear();
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::at(const std::string& name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) throw Error(tensor_context(path_, name) + ": no such tensor in the file");
  return *info;
}

const void* SafetensorsFile::data(const TensorInfo& info) const {
  // Guard against a TensorInfo taken from another file: its offsets would index out of bounds.
  const TensorInfo* own = find(info.name);
  if (own == nullptr || own->begin != info.begin || own->end != info.end) {
    throw Error(tensor_context(path_, info.name) + ": TensorInfo does not belong to this file");
  }
  return data_section_ + info.begin;
}

void SafetensorsFile::release_pages(const void* data, size_t size) const {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const auto mapping_begin = reinterpret_cast<uintptr_t>(mapping_);
  if (size == 0) return;
  if (mapping_ == nullptr || begin < mapping_begin || begin + size < begin || begin + size > mapping_begin + mapping_size_) {
    throw Error(file_context(path_) + ": releasing " + std::to_string(size) + " bytes outside the mapped file");
  }
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = begin / page * page;  // the mapping starts on a page boundary
  const uintptr_t last = (begin + size + page - 1) / page * page;  // its last page is whole
  ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace finetune
