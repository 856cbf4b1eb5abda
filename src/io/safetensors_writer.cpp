// write_safetensors: validates the tensors, lays them out like the Python library, and writes the
// file atomically (temporary file, fsync, rename, fsync of the directory).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "finetune/io/safetensors.h"
#include "finetune/util/atomic_file.h"
#include "finetune/util/errors.h"

namespace finetune {

namespace {

struct PlacedTensor {
  const TensorSource* source;
  uint64_t begin;
  uint64_t end;
};

std::string file_context(const std::string& path) {
  return "writing safetensors file '" + path + "'";
}

uint64_t checked_byte_size(const TensorSource& tensor, const std::string& path) {
  const std::string context = file_context(path) + ": tensor '" + tensor.name + "'";
  int64_t count = 0;
  try {
    count = element_count(tensor.shape);
  } catch (const Error& e) {
    throw Error(context + ": " + e.what());
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(count), dtype_size(tensor.dtype), &bytes)) {
    throw Error(context + ": byte size overflows 64 bits");
  }
  return bytes;
}

// The tensor's bytes, made now; an error when there are bytes to write and no data.
std::shared_ptr<const void> tensor_data(const PlacedTensor& tensor, const std::string& path) {
  auto data = tensor.source->data();
  if (tensor.end > tensor.begin && data == nullptr) {
    throw Error(file_context(path) + ": tensor '" + tensor.source->name + "': data is null but " +
                dtype_name(tensor.source->dtype) + " " + shape_to_string(tensor.source->shape) + " needs " +
                std::to_string(tensor.end - tensor.begin) + " bytes");
  }
  return data;
}

// Larger element sizes first, then by name: with an 8-byte aligned data section this keeps every
// tensor aligned to its element size without padding (the Python library's order).
std::vector<PlacedTensor> place_tensors(const std::vector<TensorSource>& tensors,
                                        const std::string& path) {
  std::set<std::string> names;
  for (const TensorSource& tensor : tensors) {
    if (tensor.name == "__metadata__") {
      throw Error(file_context(path) + ": '__metadata__' is reserved and cannot name a tensor");
    }
    if (!names.insert(tensor.name).second) {
      throw Error(file_context(path) + ": tensor '" + tensor.name + "' is given twice");
    }
  }
  std::vector<const TensorSource*> order;
  for (const TensorSource& tensor : tensors) order.push_back(&tensor);
  std::sort(order.begin(), order.end(), [](const TensorSource* a, const TensorSource* b) {
    const size_t size_a = dtype_size(a->dtype), size_b = dtype_size(b->dtype);
    return size_a != size_b ? size_a > size_b : a->name < b->name;
  });
  std::vector<PlacedTensor> placed;
  uint64_t offset = 0;
  for (const TensorSource* tensor : order) {
    const uint64_t bytes = checked_byte_size(*tensor, path);
    placed.push_back({tensor, offset, offset + bytes});
    offset += bytes;
  }
  return placed;
}

// The header text, padded with spaces to a multiple of 8 bytes so the data section is aligned.
std::string make_header(std::vector<PlacedTensor> placed,
                        const std::map<std::string, std::string>& metadata,
                        const std::string& path) {
  std::sort(placed.begin(), placed.end(), [](const PlacedTensor& a, const PlacedTensor& b) {
    return a.source->name < b.source->name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (const PlacedTensor& tensor : placed) {
    nlohmann::ordered_json entry;
    entry["dtype"] = dtype_name(tensor.source->dtype);
    entry["shape"] = tensor.source->shape;
    entry["data_offsets"] = {tensor.begin, tensor.end};
    header[tensor.source->name] = std::move(entry);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // names or metadata that are not UTF-8
    throw Error(file_context(path) + ": cannot encode the header: " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

void write_safetensors_streamed(const std::string& path, const std::vector<TensorSource>& tensors,
                                const std::map<std::string, std::string>& metadata) {
  const std::vector<PlacedTensor> placed = place_tensors(tensors, path);
  const std::string header = make_header(placed, metadata, path);

  uint8_t length_le[8];
  for (int i = 0; i < 8; ++i) length_le[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  write_atomically(path, [&](const AppendBytes& append) {  // errors name the path
    append(length_le, sizeof(length_le));
    append(header.data(), header.size());
    for (const PlacedTensor& tensor : placed) append(tensor_data(tensor, path).get(), tensor.end - tensor.begin);
  });
}

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSource> sources;
  sources.reserve(tensors.size());
  for (const TensorView& view : tensors) {
    const void* data = view.data;  // not owned: the caller keeps it alive
    const auto unowned = [data] { return std::shared_ptr<const void>(std::shared_ptr<void>(), data); };
    sources.push_back({view.name, view.dtype, view.shape, unowned});
  }
  write_safetensors_streamed(path, sources, metadata);
}

}  // namespace finetune
