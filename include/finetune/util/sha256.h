// SHA-256 (FIPS 180-4) and base64 (RFC 4648), for the hub's LFS object ids and upload payloads,
// from OpenSSL's libcrypto (which libcurl's OpenSSL flavour already brings). Incremental:
// update() as bytes arrive.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX

namespace finetune {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t size);
  std::string hex_digest();  // finishes; the object is not reusable after

 private:
  struct FreeContext {
    void operator()(evp_md_ctx_st* context) const;
  };
  std::unique_ptr<evp_md_ctx_st, FreeContext> context_;
};

std::string sha256_hex(const std::string& bytes);
// Of a file's bytes; throws naming the file when it cannot be read.
std::string sha256_file_hex(const std::string& path);

// Standard base64 (RFC 4648, with padding, no line breaks).
std::string base64_encode(const std::string& bytes);

}  // namespace finetune
