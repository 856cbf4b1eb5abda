// TFRecord framing with TFRecord's masked CRC-32C (util/crc32c.h).
#include "finetune/report/tfrecord.h"

#include <cstdint>
#include <cstring>

#include "finetune/util/crc32c.h"

namespace finetune {
namespace {

template <typename T>
std::string little_endian(T value) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "TFRecords are little-endian");
  std::string bytes(sizeof(T), '\0');
  std::memcpy(bytes.data(), &value, sizeof(T));
  return bytes;
}

}  // namespace

std::string tfrecord_frame(std::string_view data) {
  const std::string length = little_endian(static_cast<uint64_t>(data.size()));
  std::string record = length;
  record += little_endian(masked_crc32c(length));
  record += data;
  record += little_endian(masked_crc32c(data));
  return record;
}

}  // namespace finetune
