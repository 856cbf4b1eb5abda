#include "finetune/tokenizer/byte_level.h"

#include "finetune/util/utf8.h"

namespace finetune {

ByteLevelMap::ByteLevelMap() {
  char_to_byte_.fill(-1);
  // Printable Latin-1 bytes map to themselves; the rest go to U+0100 upwards, in byte order.
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const int cp = printable ? b : next++;
    byte_to_char_[b].clear();
    utf8_append(byte_to_char_[b], static_cast<char32_t>(cp));
    char_to_byte_[cp] = b;
  }
}

std::string ByteLevelMap::encode(const std::string& bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += byte_to_char_[b];
  return out;
}

std::string ByteLevelMap::decode_token(const std::string& mapped) const {
  std::string out;
  out.reserve(mapped.size());
  size_t i = 0;
  while (i < mapped.size()) {
    size_t len = utf8_sequence_length(static_cast<unsigned char>(mapped[i]));
    if (i + len > mapped.size()) len = 1;
    const std::vector<char32_t> cps = utf8_decode(mapped.substr(i, len));
    const char32_t cp = cps.empty() ? 0xFFFD : cps[0];
    if (cp < char_to_byte_.size() && char_to_byte_[cp] >= 0) {
      out.push_back(static_cast<char>(char_to_byte_[cp]));
    } else {
      return mapped;
    }
    i += len;
  }
  return out;
}

}  // namespace finetune
