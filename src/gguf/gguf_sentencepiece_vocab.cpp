#include "finetune/gguf/gguf_sentencepiece_vocab.h"

#include <cstring>
#include <filesystem>
#include <string_view>

#include <nlohmann/json.hpp>

#include "finetune/gguf/gguf_vocab.h"
#include "finetune/util/errors.h"
#include "finetune/util/file_contents.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

// gguf-py TokenType (= sentencepiece's piece types).
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct Piece {
  std::string text;
  float score = 0.0f;
  int32_t type = kNormal;  // ModelProto.SentencePiece.Type, NORMAL when absent
};

// Protobuf wire format reader over ModelProto: repeated SentencePiece pieces = 1 {string piece = 1;
// float score = 2; Type type = 3}. Other fields are skipped.
class PieceReader {
 public:
  PieceReader(std::string_view data, const std::string& path) : data_(data), path_(path) {}

  std::vector<Piece> pieces() {
    std::vector<Piece> out;
    while (pos_ < data_.size()) {
      const uint64_t key = varint();
      if (key >> 3 == 1 && (key & 7) == 2) {
        PieceReader inner(bytes(), path_);
        out.push_back(inner.piece());
      } else {
        skip(key & 7);
      }
    }
    return out;
  }

 private:
  Piece piece() {
    Piece p;
    while (pos_ < data_.size()) {
      const uint64_t key = varint();
      if (key == ((1 << 3) | 2)) {
        p.text = std::string(bytes());
      } else if (key == ((2 << 3) | 5)) {
        need(4);
        std::memcpy(&p.score, data_.data() + pos_, 4);  // little-endian float, as on every host we build for
        pos_ += 4;
      } else if (key == ((3 << 3) | 0)) {
        p.type = static_cast<int32_t>(varint());
      } else {
        skip(key & 7);
      }
    }
    return p;
  }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const auto b = static_cast<unsigned char>(data_[pos_++]);
      value |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return value;
    }
    fail();
  }
  std::string_view bytes() {
    const uint64_t length = varint();
    need(length);
    const auto out = data_.substr(pos_, length);
    pos_ += length;
    return out;
  }
  void skip(uint64_t wire_type) {
    if (wire_type == 0) {
      varint();
    } else if (wire_type == 1 || wire_type == 5) {
      need(wire_type == 1 ? 8 : 4);
      pos_ += wire_type == 1 ? 8 : 4;
    } else if (wire_type == 2) {
      bytes();
    } else {
      fail();
    }
  }
  void need(uint64_t n) const {
    if (n > data_.size() - pos_) fail();
  }
  [[noreturn]] void fail() const { throw Error(path_ + ": not a sentencepiece model (malformed protobuf)"); }

  std::string_view data_;
  size_t pos_ = 0;
  const std::string& path_;
};

nlohmann::json read_json_file(const std::filesystem::path& path) {
  try {
    return nlohmann::json::parse(read_file(path.string()));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + ": " + e.what());
  }
}

void set_token(GgufSentencePieceVocab& vocab, size_t id, std::string text, float score, int32_t type) {
  vocab.tokens[id] = std::move(text);
  vocab.scores[id] = score;
  vocab.types[id] = type;
}

// added_tokens.json, then tokenizer_config.json's added_tokens_decoder (ids past vocab_size are
// skipped, as the converter does with a warning).
void add_added_tokens(GgufSentencePieceVocab& vocab, const std::filesystem::path& dir) {
  const auto size = static_cast<int64_t>(vocab.tokens.size());
  if (std::filesystem::is_regular_file(dir / "added_tokens.json")) {
    for (const auto& [token, id] : read_json_file(dir / "added_tokens.json").items()) {
      if (id.get<int64_t>() < size) set_token(vocab, id.get<int64_t>(), token, -1000.0f, kUserDefined);
    }
  }
  if (!std::filesystem::is_regular_file(dir / "tokenizer_config.json")) return;
  const auto tc = read_json_file(dir / "tokenizer_config.json");
  if (!tc.contains("added_tokens_decoder") || !tc["added_tokens_decoder"].is_object()) return;
  for (const auto& [key, data] : tc["added_tokens_decoder"].items()) {
    const int64_t id = std::stoll(key);
    if (id >= size) continue;
    std::string token = data.at("content").get<std::string>();
    const bool special = data.contains("special") && data["special"].is_boolean() && data["special"].get<bool>();
    if (special || gguf_token_looks_special(token)) {
      set_token(vocab, id, token, -1000.0f, kControl);
    } else {
      for (size_t at = token.find("\xe2\x96\x81"); at != std::string::npos; at = token.find("\xe2\x96\x81", at + 1)) {
        token.replace(at, 3, " ");
      }
      set_token(vocab, id, token, -1000.0f, kUserDefined);
    }
  }
}

}  // namespace

namespace {

// config.json's vocab_size slots of "[PAD<i>]" / -10000 / UNUSED.
GgufSentencePieceVocab padded_vocab(int64_t vocab_size) {
  GgufSentencePieceVocab vocab;
  vocab.tokens.resize(vocab_size);
  for (int64_t i = 0; i < vocab_size; ++i) vocab.tokens[i] = "[PAD" + std::to_string(i) + "]";
  vocab.scores.assign(vocab_size, -10000.0f);
  vocab.types.assign(vocab_size, kUnused);
  return vocab;
}

std::vector<Piece> read_pieces(const std::filesystem::path& dir) {
  const auto path = (dir / "tokenizer.model").string();
  auto pieces = PieceReader(read_file(path), path).pieces();
  if (pieces.empty()) throw Error(path + ": sentencepiece model has no pieces");
  return pieces;
}

void set_piece(GgufSentencePieceVocab& vocab, size_t id, const Piece& piece) {
  const bool kept = piece.type == kUnknown || piece.type == kControl || piece.type == kUnused || piece.type == kByte;
  set_token(vocab, id, piece.text, piece.score, kept ? piece.type : kNormal);
}

// Phi3MiniModel.set_vocab's added tokens: added_tokens.json (ids past vocab_size skipped), then
// tokenizer_config.json's added_tokens_decoder and tokenizer.json's added_tokens as they are
// (USER_DEFINED, CONTROL when special; score -1000).
void add_phi3_added_tokens(GgufSentencePieceVocab& vocab, const std::filesystem::path& dir) {
  const auto size = static_cast<int64_t>(vocab.tokens.size());
  if (std::filesystem::is_regular_file(dir / "added_tokens.json")) {
    for (const auto& [token, id] : read_json_file(dir / "added_tokens.json").items()) {
      if (id.get<int64_t>() < size) set_token(vocab, id.get<int64_t>(), token, -1000.0f, kUserDefined);
    }
  }
  auto add = [&](const nlohmann::json& data, int64_t id, const std::filesystem::path& source) {
    if (id < 0 || id >= size) {
      throw Error(source.string() + ": added token id " + std::to_string(id) + " is past config.json's vocab_size " +
                  std::to_string(size) + " (llama.cpp's converter fails on it too)");
    }
    const bool special = data.contains("special") && data["special"].is_boolean() && data["special"].get<bool>();
    set_token(vocab, id, data.at("content").get<std::string>(), -1000.0f, special ? kControl : kUserDefined);
  };
  if (std::filesystem::is_regular_file(dir / "tokenizer_config.json")) {
    const auto tc = read_json_file(dir / "tokenizer_config.json");
    if (tc.contains("added_tokens_decoder") && tc["added_tokens_decoder"].is_object()) {
      for (const auto& [key, data] : tc["added_tokens_decoder"].items()) add(data, std::stoll(key), dir / "tokenizer_config.json");
    }
  }
  if (std::filesystem::is_regular_file(dir / "tokenizer.json")) {
    const auto tokenizer = read_json_file(dir / "tokenizer.json");
    for (const auto& data : tokenizer.value("added_tokens", nlohmann::json::array())) {
      add(data, data.at("id").get<int64_t>(), dir / "tokenizer.json");
    }
  }
}

}  // namespace

GgufSentencePieceVocab read_gguf_sentencepiece_vocab(const std::string& model_dir, int64_t vocab_size) {
  const std::filesystem::path dir(model_dir);
  auto vocab = padded_vocab(vocab_size);
  const auto pieces = read_pieces(dir);
  for (size_t id = 0; id < pieces.size() && static_cast<int64_t>(id) < vocab_size; ++id) set_piece(vocab, id, pieces[id]);
  add_added_tokens(vocab, dir);
  return vocab;
}

GgufSentencePieceVocab read_gguf_phi3_vocab(const std::string& model_dir, std::optional<int64_t> vocab_size) {
  const std::filesystem::path dir(model_dir);
  const auto pieces = read_pieces(dir);
  auto vocab = padded_vocab(vocab_size.value_or(static_cast<int64_t>(pieces.size())));
  if (pieces.size() > vocab.tokens.size()) {
    throw Error((dir / "tokenizer.model").string() + ": " + std::to_string(pieces.size()) +
                " pieces, more than config.json's vocab_size " + std::to_string(vocab.tokens.size()));
  }
  for (size_t id = 0; id < pieces.size(); ++id) set_piece(vocab, id, pieces[id]);
  add_phi3_added_tokens(vocab, dir);
  return vocab;
}

}  // namespace finetune
