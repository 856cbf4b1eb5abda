// CRC-32C and TFRecord's masked CRC against RFC 3720 (appendix B.4) and tensorboard's own
// implementation: every masked value below is what
// tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c (tensorboard 2.21) printed
// for the same bytes, and its crc32c printed the unmasked ones (equal to the RFC's).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "finetune/util/crc32c.h"

namespace finetune {
namespace {

std::string bytes_of(std::initializer_list<int> values) {
  std::string bytes;
  for (const int v : values) bytes += static_cast<char>(v);
  return bytes;
}

std::string ascending(int first, int count, int delta) {
  std::string bytes;
  for (int i = 0; i < count; ++i) bytes += static_cast<char>(first + i * delta);
  return bytes;
}

struct Case {
  const char* name;
  std::string bytes;
  uint32_t crc;
  uint32_t masked;
};

std::vector<Case> cases() {
  // RFC 3720 B.4: the iSCSI SCSI Read (10) command PDU.
  const std::string read_pdu = bytes_of({0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0x14, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0x14, 0, 0, 0, 0x18,
                                         0x28, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0});
  return {
      {"32 zeros", std::string(32, '\0'), 0x8a9136aau, 0x0fd7fffau},
      {"32 x 0xff", std::string(32, '\xff'), 0x62a8ab43u, 0xf909b029u},
      {"0..31", ascending(0, 32, 1), 0x46dd794eu, 0x951f7892u},
      {"31..0", ascending(31, 32, -1), 0x113fdb5cu, 0x593b0d57u},
      {"read PDU", read_pdu, 0xd9963a56u, 0x17309e04u},
      {"123456789", "123456789", 0xe3069283u, 0xc78ab0e5u},  // the CRC catalogue's check value
      {"empty", "", 0x00000000u, 0xa282ead8u},
      {"1000 x 'a'", std::string(1000, 'a'), 0x9f19ef6au, 0x8158290bu},
      // struct.pack("<Q", 8): the length header of an 8-byte TFRecord
      {"uint64 8", bytes_of({8, 0, 0, 0, 0, 0, 0, 0}), 0xce13b650u, 0x0f2486ffu},
  };
}

TEST(Crc32c, Rfc3720AndTensorboardVectors) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(crc32c(c.bytes), c.crc);
    EXPECT_EQ(masked_crc32c(c.bytes), c.masked);
    EXPECT_EQ(crc32c_mask(crc32c(c.bytes)), c.masked);
  }
}

TEST(Crc32c, MaskRotatesAndAdds) {
  EXPECT_EQ(crc32c_mask(0), 0xa282ead8u);
  EXPECT_EQ(crc32c_mask(1), (1u << 17) + 0xa282ead8u);
  EXPECT_EQ(crc32c_mask(0x8000u), 1u + 0xa282ead8u);            // bit 15 rotates to bit 0
  EXPECT_EQ(crc32c_mask(0xFFFFFFFFu), 0xFFFFFFFFu + 0xa282ead8u);  // wraps modulo 2^32
}

}  // namespace
}  // namespace finetune
