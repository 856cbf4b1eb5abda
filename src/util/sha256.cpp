// SHA-256 and base64 through OpenSSL's libcrypto (see sha256.h).
#include "finetune/util/sha256.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>

#include "finetune/util/errors.h"

namespace finetune {

void Sha256::FreeContext::operator()(evp_md_ctx_st* context) const { EVP_MD_CTX_free(context); }

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  if (!context_ || EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr) != 1) {
    throw Error("SHA-256: OpenSSL could not start a digest");
  }
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, size_t size) {
  if (!context_) throw Error("SHA-256: update() after hex_digest()");
  if (size > 0 && EVP_DigestUpdate(context_.get(), data, size) != 1) throw Error("SHA-256: OpenSSL digest update failed");
}

std::string Sha256::hex_digest() {
  if (!context_) throw Error("SHA-256: hex_digest() called twice");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(context_.get(), digest, &length) != 1) throw Error("SHA-256: OpenSSL digest final failed");
  context_.reset();
  static const char* const hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

std::string sha256_hex(const std::string& bytes) {
  Sha256 hash;
  hash.update(bytes.data(), bytes.size());
  return hash.hex_digest();
}

std::string sha256_file_hex(const std::string& path) {
  std::unique_ptr<std::FILE, decltype(&std::fclose)> file(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!file) throw Error(path + ": cannot open to hash");
  Sha256 hash;
  std::string buffer(size_t{1} << 20, '\0');
  size_t got = 0;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0) hash.update(buffer.data(), got);
  if (std::ferror(file.get())) throw Error(path + ": read error while hashing");
  return hash.hex_digest();
}

std::string base64_encode(const std::string& bytes) {
  // EVP_EncodeBlock takes an int length: encode in chunks of a multiple of 3 bytes, which
  // concatenate without padding in between.
  constexpr size_t kChunk = size_t{3} << 20;
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::string encoded;
  for (size_t begin = 0; begin < bytes.size(); begin += kChunk) {
    const size_t size = std::min(kChunk, bytes.size() - begin);
    encoded.resize((size + 2) / 3 * 4 + 1);  // + the terminating NUL EVP_EncodeBlock writes
    const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(encoded.data()),
                                        reinterpret_cast<const unsigned char*>(bytes.data() + begin), static_cast<int>(size));
    out.append(encoded.data(), static_cast<size_t>(written));
  }
  return out;
}

}  // namespace finetune
