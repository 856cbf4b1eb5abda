#include "finetune/tokenizer/sentencepiece_proto.h"

#include <cstdint>
#include <string_view>

#include "finetune/util/errors.h"

namespace finetune {
namespace {

struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  uint64_t varint = 0;      // wire type 0
  std::string_view bytes;   // wire type 2
  std::string_view raw;     // the whole field, key included
};

class WireReader {
 public:
  WireReader(std::string_view data, const std::string& path) : data_(data), path_(path) {}
  bool done() const { return pos_ >= data_.size(); }

  Field next() {
    const size_t start = pos_;
    const uint64_t key = varint();
    Field f;
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire_type = static_cast<uint32_t>(key & 7);
    switch (f.wire_type) {
      case 0: f.varint = varint(); break;
      case 1: skip(8); break;
      case 2: {
        const uint64_t len = varint();
        if (len > data_.size() - pos_) fail();
        f.bytes = data_.substr(pos_, len);
        pos_ += len;
        break;
      }
      case 5: skip(4); break;
      default: fail();
    }
    f.raw = data_.substr(start, pos_ - start);
    return f;
  }

 private:
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) fail();
      const auto b = static_cast<unsigned char>(data_[pos_++]);
      value |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return value;
    }
    fail();
    return 0;
  }
  void skip(size_t n) {
    if (n > data_.size() - pos_) fail();
    pos_ += n;
  }
  [[noreturn]] void fail() const { throw Error(path_ + ": not a sentencepiece model (malformed protobuf)"); }

  std::string_view data_;
  size_t pos_ = 0;
  const std::string& path_;
};

void append_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

}  // namespace

SentencePieceModelInfo parse_sentencepiece_model(const std::string& serialized, const std::string& path) {
  SentencePieceModelInfo info;
  WireReader reader(serialized, path);
  while (!reader.done()) {
    const Field field = reader.next();
    if (field.number == 1 && field.wire_type == 2) {  // repeated SentencePiece pieces
      SentencePieceEntry entry;
      WireReader piece_reader(field.bytes, path);
      while (!piece_reader.done()) {
        const Field f = piece_reader.next();
        if (f.number == 1 && f.wire_type == 2) entry.piece = std::string(f.bytes);
        if (f.number == 3 && f.wire_type == 0) entry.type = static_cast<int>(f.varint);
      }
      info.pieces.push_back(std::move(entry));
    } else if (field.number == 2 && field.wire_type == 2) {  // TrainerSpec
      WireReader spec_reader(field.bytes, path);
      while (!spec_reader.done()) {
        const Field f = spec_reader.next();
        if (f.number == 3 && f.wire_type == 0) info.model_type = static_cast<int>(f.varint);
      }
    }
  }
  if (info.pieces.empty()) throw Error(path + ": sentencepiece model has no pieces");
  return info;
}

std::string without_sentencepiece_normalization(const std::string& serialized, const std::string& path) {
  std::string out;
  out.reserve(serialized.size());
  WireReader reader(serialized, path);
  while (!reader.done()) {
    const Field field = reader.next();
    if (field.number == 4) continue;  // self_test_data
    if (field.number != 3 || field.wire_type != 2) {  // not NormalizerSpec
      out.append(field.raw);
      continue;
    }
    std::string spec;
    WireReader spec_reader(field.bytes, path);
    while (!spec_reader.done()) {
      const Field f = spec_reader.next();
      // 1 name, 2 precompiled_charsmap, 3 add_dummy_prefix, 4 remove_extra_whitespaces,
      // 5 escape_whitespaces, 6 normalization_rule_tsv
      if (f.number == 2 || f.number == 3 || f.number == 4 || f.number == 6 || f.number == 1) continue;
      spec.append(f.raw);
    }
    const std::string name = "identity";
    append_varint(spec, (1 << 3) | 2);
    append_varint(spec, name.size());
    spec += name;
    append_varint(spec, (3 << 3) | 0);
    append_varint(spec, 0);
    append_varint(spec, (4 << 3) | 0);
    append_varint(spec, 0);
    append_varint(out, (3 << 3) | 2);
    append_varint(out, spec.size());
    out += spec;
  }
  return out;
}

}  // namespace finetune
