// SHA-256 (FIPS 180-4), for the hub's LFS object ids. Incremental: update() as bytes arrive.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace finetune {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  std::string hex_digest();  // finishes; the object is not reusable after

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;
};

std::string sha256_hex(const std::string& bytes);
// Of a file's bytes; throws naming the file when it cannot be read.
std::string sha256_file_hex(const std::string& path);

// Standard base64 (RFC 4648, with padding).
std::string base64_encode(const std::string& bytes);

}  // namespace finetune
