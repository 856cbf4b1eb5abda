// Protobuf wire format for the TensorBoard events: varints, little-endian fixed32/fixed64, and
// length-delimited strings and sub-messages (protobuf.dev/programming-guides/encoding).
#include "finetune/report/event_proto.h"

#include <cstring>

namespace finetune {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (uint64_t{field} << 3) | type); }

template <typename T>
void put_little_endian(std::string& out, T value) {
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "event files are little-endian");
  out.append(reinterpret_cast<const char*>(bytes), sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event fields up to summary; proto3 leaves a zero wall_time or step out (+0.0 only: protobuf
// tests a double's bits, so -0.0 is written).
std::string event_header(double wall_time, int64_t step) {
  std::string event;
  uint64_t wall_time_bits;
  std::memcpy(&wall_time_bits, &wall_time, sizeof wall_time);
  if (wall_time_bits != 0) {
    put_key(event, 1, kFixed64);
    put_little_endian(event, wall_time);
  }
  if (step != 0) {
    put_key(event, 2, kVarint);
    put_varint(event, static_cast<uint64_t>(step));  // int64: a negative step takes ten bytes
  }
  return event;
}

}  // namespace

std::string encode_file_version_event(double wall_time, std::string_view writer) {
  std::string event = event_header(wall_time, 0);
  put_bytes(event, 3, "brain.Event:2");
  std::string source_metadata;
  if (!writer.empty()) put_bytes(source_metadata, 1, writer);
  put_bytes(event, 10, source_metadata);
  return event;
}

std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, double value) {
  std::string summary_value;
  if (!tag.empty()) put_bytes(summary_value, 1, tag);
  put_key(summary_value, 2, kFixed32);  // a oneof member: written even when 0
  put_little_endian(summary_value, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string event = event_header(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

}  // namespace finetune
