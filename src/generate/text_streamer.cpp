#include "finetune/generate/text_streamer.h"

#include <algorithm>

#include "finetune/util/utf8.h"

namespace finetune {
namespace {

// transformers' TextStreamer._is_chinese_char: the CJK Unified Ideographs blocks.
bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// The byte offset where the text's last UTF-8 character begins.
size_t last_character_start(const std::string& text) {
  size_t at = text.size();
  while (at > 0) {
    --at;
    if ((static_cast<unsigned char>(text[at]) & 0xC0) != 0x80) break;
  }
  return at;
}

// Whether text[0, end) ends with a proper prefix of some stop string: then it is held back.
size_t before_stop_prefix(const std::string& text, size_t end, const std::vector<std::string>& stop_strings) {
  size_t cut = end;
  for (const auto& stop : stop_strings) {
    for (size_t k = std::min(stop.size() - 1, end); k > 0; --k) {
      if (text.compare(end - k, k, stop, 0, k) == 0) {
        cut = std::min(cut, end - k);
        break;
      }
    }
  }
  return cut;
}

}  // namespace

TextStreamer::TextStreamer(std::vector<std::string> stop_strings) : stop_strings_(std::move(stop_strings)) {}

std::string TextStreamer::push(const std::string& text) {
  size_t end;
  const size_t last = last_character_start(text);
  const auto last_char = utf8_decode(text.substr(last));
  if (!text.empty() && text.back() == '\n') {
    end = text.size();
  } else if (!last_char.empty() && is_cjk(last_char.back())) {
    end = text.size();
  } else {
    const size_t space = text.rfind(' ');
    end = space == std::string::npos ? 0 : space + 1;
  }
  end = before_stop_prefix(text, end, stop_strings_);
  if (end <= printed_) return "";
  std::string out = text.substr(printed_, end - printed_);
  printed_ = end;
  return out;
}

std::string TextStreamer::finish(const std::string& text) {
  if (text.size() <= printed_) return "";
  std::string out = text.substr(printed_);
  printed_ = text.size();
  return out;
}

}  // namespace finetune
