// CRC-32C, one byte at a time through a 256-entry table built at compile time; event files are a
// few kilobytes, so no slicing or SSE4.2 path.
#include "finetune/util/crc32c.h"

#include <array>

namespace finetune {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed
constexpr uint32_t kMaskDelta = 0xa282ead8u;

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ kPolynomial : crc >> 1;
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (const char c : bytes) crc = kTable[(crc ^ static_cast<uint8_t>(c)) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

uint32_t masked_crc32c(std::string_view bytes) { return crc32c_mask(crc32c(bytes)); }

}  // namespace finetune
