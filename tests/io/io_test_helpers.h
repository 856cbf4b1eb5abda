// Helpers shared by the io tests: raw file access, so malformed safetensors files can be crafted
// byte by byte (and the shared TempDir).
#pragma once

#include <gtest/gtest.h>

#include "../test_support.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace finetune::io_test {

using Bytes = std::vector<uint8_t>;

using testing::TempDir;

inline void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline Bytes u64_le(uint64_t value) {
  Bytes bytes(8);
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
  return bytes;
}

// A safetensors file from its parts: 8-byte length of `header`, `header`, then `data`.
inline Bytes safetensors_bytes(const std::string& header, const Bytes& data) {
  Bytes bytes = u64_le(header.size());
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

inline Bytes pattern_bytes(size_t size, uint8_t seed) {
  Bytes bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(seed + 37 * i + (i >> 8));
  return bytes;
}

}  // namespace finetune::io_test
