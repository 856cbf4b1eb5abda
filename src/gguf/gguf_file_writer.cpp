#include "finetune/gguf/gguf_file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

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
  check_not_begun("key '" + key + "'");
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

size_t GgufFileWriter::add_tensor_info(const std::string& name, const std::vector<int64_t>& shape,
                                       uint32_t ggml_type, uint64_t byte_count) {
  check_not_begun("tensor '" + name + "'");
  for (const auto& tensor : tensors_) {
    if (tensor.name == name) throw Error("GGUF: duplicate tensor '" + name + "'");
  }
  tensors_.push_back({name, shape, ggml_type, byte_count, data_bytes_, 0});
  data_bytes_ = aligned(data_bytes_ + byte_count);
  return tensors_.size() - 1;
}

void GgufFileWriter::check_not_begun(const std::string& what) const {
  if (fd_ >= 0 || !path_.empty()) throw Error("GGUF " + path_ + ": " + what + " added after the header was written");
}

void GgufFileWriter::begin(const std::string& path) {
  check_not_begun("header");
  std::string header;
  put<uint32_t>(header, 0x46554747);  // "GGUF"
  put<uint32_t>(header, kGgufVersion);
  put<uint64_t>(header, tensors_.size());
  put<uint64_t>(header, keys_.size());
  header += kv_;
  for (const auto& tensor : tensors_) {
    put_string(header, tensor.name);
    put<uint32_t>(header, static_cast<uint32_t>(tensor.shape.size()));
    for (auto it = tensor.shape.rbegin(); it != tensor.shape.rend(); ++it) put<uint64_t>(header, *it);
    put<uint32_t>(header, tensor.type);
    put<uint64_t>(header, tensor.offset);
  }
  header.resize(aligned(header.size()), '\0');
  data_start_ = header.size();

  path_ = path;
  tmp_path_ = path + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(path + ": cannot create '" + tmp_path_ + "': " + std::strerror(errno));
  // The padding between tensors is never written: the file's holes read as zeros.
  if (::ftruncate(fd_, static_cast<off_t>(data_start_ + data_bytes_)) != 0) {
    throw Error(path + ": cannot size '" + tmp_path_ + "': " + std::strerror(errno));
  }
  write_at(0, header.data(), header.size());
}

void GgufFileWriter::write_at(uint64_t position, const void* data, size_t size) {
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::pwrite(fd_, bytes, std::min<size_t>(size, size_t{1} << 30), static_cast<off_t>(position));
    if (written < 0) {
      if (errno == EINTR) continue;
      throw Error(path_ + ": cannot write '" + tmp_path_ + "': " + std::strerror(errno));
    }
    bytes += written;
    position += static_cast<uint64_t>(written);
    size -= static_cast<size_t>(written);
  }
}

void GgufFileWriter::write_tensor_data(size_t index, uint64_t offset, const void* data, size_t size) {
  if (fd_ < 0) throw Error("GGUF: tensor data written before begin()");
  Tensor& tensor = tensors_.at(index);
  if (offset + size > tensor.byte_count) {
    throw Error(path_ + ": tensor '" + tensor.name + "': " + std::to_string(offset + size) + " bytes written of " +
                std::to_string(tensor.byte_count));
  }
  write_at(data_start_ + tensor.offset + offset, data, size);
  tensor.written += size;
}

void GgufFileWriter::finish() {
  if (fd_ < 0) throw Error("GGUF: finish() before begin()");
  for (const auto& tensor : tensors_) {
    if (tensor.written != tensor.byte_count) {
      throw Error(path_ + ": tensor '" + tensor.name + "': " + std::to_string(tensor.written) + " of " +
                  std::to_string(tensor.byte_count) + " bytes written");
    }
  }
  if (::fsync(fd_) != 0) throw Error(path_ + ": cannot fsync '" + tmp_path_ + "': " + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;  // even a failed close releases the descriptor
  if (::close(fd) != 0) {
    ::unlink(tmp_path_.c_str());
    throw Error(path_ + ": cannot close '" + tmp_path_ + "': " + std::strerror(errno));
  }
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp_path_.c_str());
    throw Error(path_ + ": cannot rename '" + tmp_path_ + "' into place: " + reason);
  }
  tmp_path_.clear();
  sync_parent_dir(path_);
}

GgufFileWriter::~GgufFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
}

}  // namespace finetune
