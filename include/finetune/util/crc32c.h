// CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF, as in
// RFC 3720) and the masked form TFRecord files store, so a CRC of data that holds CRCs is not
// itself a CRC of a CRC (tensorflow/core/lib/hash/crc32c.h: Mask).
#pragma once

#include <cstdint>
#include <string_view>

namespace finetune {

uint32_t crc32c(std::string_view bytes);

// ((crc >> 15) | (crc << 17)) + 0xa282ead8, modulo 2^32.
uint32_t crc32c_mask(uint32_t crc);

// crc32c_mask(crc32c(bytes)): what a TFRecord stores after its length and after its data.
uint32_t masked_crc32c(std::string_view bytes);

}  // namespace finetune
