// SHA-256 and base64 (the hub's LFS object ids and upload payloads) against Python's hashlib and
// base64: every expected string below is what CPython printed for the same bytes.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "../test_support.h"
#include "finetune/util/sha256.h"

namespace finetune {
namespace {

// hashlib.sha256(b"a" * 1_000_000).hexdigest()
const char* const kMillionA = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";

std::string all_bytes() {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  return bytes;
}

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),  // 448 bits
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopq"
                       "rstnopqrstu"),  // 896 bits
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), kMillionA);
}

TEST(Sha256, PaddingBoundaries) {
  // 55 bytes: the length fits the first block; 56..63: padding spills into a second block;
  // 64, 119, 120: whole blocks and the next boundary.
  const std::vector<std::pair<size_t, std::string>> cases = {
      {55, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072"},
      {56, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e"},
      {63, "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2"},
      {64, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c"},
      {65, "9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9"},
      {119, "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c"},
      {120, "13f05a0b594787f5ecd315edc96141bd3243203d1b7d4f0836f37308b276ba98"},
  };
  for (const auto& [size, digest] : cases) {
    SCOPED_TRACE(size);
    EXPECT_EQ(sha256_hex(std::string(size, 'x')), digest);
  }
}

TEST(Sha256, EveryByteValue) {
  // hashlib.sha256(bytes(range(256))): bytes >= 0x80 must not sign-extend.
  EXPECT_EQ(sha256_hex(all_bytes()), "40aff2e9d2d8922e47afd4648e6967497158785fbd1da870e7110266bf944880");
}

TEST(Sha256, IncrementalUpdatesInAnyChunkSize) {
  const std::string million(1000000, 'a');
  for (const size_t chunk : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, size_t{999999}}) {
    SCOPED_TRACE(chunk);
    Sha256 hash;
    for (size_t at = 0; at < million.size(); at += chunk) {
      hash.update(million.data() + at, std::min(chunk, million.size() - at));
    }
    EXPECT_EQ(hash.hex_digest(), kMillionA);
  }
  // Mixed sizes, zero-length updates included.
  Sha256 hash;
  const size_t sizes[] = {0, 1, 63, 0, 64, 65, 1000, 7};
  size_t at = 0, next = 0;
  while (at < million.size()) {
    const size_t take = std::min(sizes[next++ % 8], million.size() - at);
    hash.update(million.data() + at, take);
    at += take;
  }
  EXPECT_EQ(hash.hex_digest(), kMillionA);
}

TEST(Sha256, FileOfBinaryBytes) {
  testing::TempDir dir("sha256");
  // bytes((i * 7 + 3) % 256 for i in range(100000))
  std::string small;
  for (int i = 0; i < 100000; ++i) small += static_cast<char>((i * 7 + 3) % 256);
  dir.write("small.bin", small);
  EXPECT_EQ(sha256_file_hex(dir.file("small.bin")), "d96bab6a55ee326ba206dd4a85a6e95e14360d7fabbf448f03e689c24382b7d0");
  EXPECT_EQ(sha256_file_hex(dir.file("small.bin")), sha256_hex(small));

  // Over the reader's 1 MiB buffer: bytes((i * 31 + i // 256) % 256 for i in range(3 * 2**20 + 17))
  std::string large;
  const size_t size = 3 * (size_t{1} << 20) + 17;
  large.reserve(size);
  for (size_t i = 0; i < size; ++i) large += static_cast<char>((i * 31 + i / 256) % 256);
  dir.write("large.bin", large);
  EXPECT_EQ(sha256_file_hex(dir.file("large.bin")), "9664051a0fd2eb4094c198506f25e7e893e3e885e83b105799bc900027cacaa2");

  dir.write("empty.bin", "");
  EXPECT_EQ(sha256_file_hex(dir.file("empty.bin")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, MissingFileIsNamed) {
  testing::TempDir dir("sha256");
  const std::string path = dir.file("absent.bin");
  const std::string message = testing::error_message([&] { sha256_file_hex(path); });
  testing::expect_contains(message, {path, "cannot open"});
}

TEST(Base64, LengthsZeroToSix) {
  // base64.b64encode of b"", b"f", ..., b"foobar" (RFC 4648's test vectors)
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foob"), "Zm9vYg==");
  EXPECT_EQ(base64_encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
}

TEST(Base64, BinaryBytes) {
  EXPECT_EQ(base64_encode(std::string(1, '\0')), "AA==");
  EXPECT_EQ(base64_encode(std::string(3, '\0')), "AAAA");
  EXPECT_EQ(base64_encode("\xff\xfe"), "//4=");
  EXPECT_EQ(base64_encode(all_bytes()),
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0BBQkNERUZHSElKS0xNTk9Q"
            "UVJTVFVWV1hZWltcXV5fYGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn+AgYKDhIWGh4iJiouMjY6PkJGSk5SVlpeYmZqbnJ2en6Ch"
            "oqOkpaanqKmqq6ytrq+wsbKztLW2t7i5uru8vb6/wMHCw8TFxsfIycrLzM3Oz9DR0tPU1dbX2Nna29zd3t/g4eLj5OXm5+jp6uvs7e7v8PHy"
            "8/T19vf4+fr7/P3+/w==");
}

TEST(Base64, OfADigest) {
  // base64.b64encode(hashlib.sha256(b"abc").digest()): the digest's raw bytes, not its hex.
  std::string digest;
  const std::string hex = sha256_hex("abc");
  for (size_t i = 0; i < hex.size(); i += 2) digest += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  EXPECT_EQ(base64_encode(digest), "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=");
}

}  // namespace
}  // namespace finetune
