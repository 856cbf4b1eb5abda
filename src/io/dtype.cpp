// Element types of safetensors files: byte sizes, spellings, and element counts of shapes.
#include <limits>

#include "finetune/io/safetensors.h"
#include "finetune/util/errors.h"

namespace finetune {

namespace {

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};

// One table so that size, spelling and parsing can never disagree.
constexpr DTypeEntry kDTypes[] = {
    {DType::F64, "F64", 8},   {DType::F32, "F32", 4}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},   {DType::I8, "I8", 1},   {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};

const DTypeEntry& dtype_entry(DType dtype) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  throw Error("invalid DType value " + std::to_string(static_cast<int>(dtype)));
}

}  // namespace

size_t dtype_size(DType dtype) { return dtype_entry(dtype).size; }

std::string dtype_name(DType dtype) { return dtype_entry(dtype).name; }

DType dtype_from_name(const std::string& name, const std::string& context) {
  for (const DTypeEntry& entry : kDTypes) {
    if (name == entry.name) return entry.dtype;
  }
  std::string known;
  for (const DTypeEntry& entry : kDTypes) {
    known += known.empty() ? "" : ", ";
    known += entry.name;
  }
  throw Error(context + ": unknown or unsupported dtype '" + name + "' (supported: " + known + ")");
}

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t count = 1;  // a scalar (shape []) holds one element
  for (int64_t dim : shape) {
    if (dim < 0) throw Error("negative dimension " + std::to_string(dim) + " in shape");
    if (__builtin_mul_overflow(count, dim, &count)) {
      throw Error("shape's element count overflows 64 bits");
    }
  }
  return count;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  }
  return text + "]";
}

}  // namespace finetune
