#include "finetune/tokenizer/decode_text.h"

#include <utility>

namespace finetune {
namespace {

// Length of the valid UTF-8 sequence at `i`, or 0 with `invalid_len` set to the length of the
// maximal prefix of a valid sequence (at least 1), following the WHATWG / Rust rule.
size_t valid_sequence(const std::string& s, size_t i, size_t& invalid_len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  invalid_len = 1;
  if (b0 < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return 0;
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return 0;
    invalid_len = k + 1;
  }
  return need + 1;
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
}

}  // namespace

std::string utf8_lossy(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t invalid_len = 1;
    const size_t len = valid_sequence(bytes, i, invalid_len);
    if (len > 0) {
      out.append(bytes, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += invalid_len;
    }
  }
  return out;
}

std::string clean_up_tokenization(const std::string& text) {
  std::string out = text;
  const std::pair<const char*, const char*> rules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : rules) replace_all(out, from, to);
  return out;
}

}  // namespace finetune
