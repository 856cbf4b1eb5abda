// Incremental printing of a row's text as it is generated, as transformers' TextStreamer decides
// what is printable: everything once the text ends with a newline or a CJK character, else up to
// the last space (a word may still change with the next token). So a trailing incomplete UTF-8
// character (decoded as U+FFFD until its last byte arrives) is never printed early: it follows
// the last space. One hold-back of ours: a tail that could be the start of a stop string, since
// the final text is cut before a stop string (stop_criteria.h).
#pragma once

#include <string>
#include <vector>

namespace finetune {

class TextStreamer {
 public:
  explicit TextStreamer(std::vector<std::string> stop_strings = {});

  // text: the row's whole decoded text so far. Returns what is newly printable.
  std::string push(const std::string& text);
  // text: the row's final text. Returns the rest.
  std::string finish(const std::string& text);

 private:
  std::vector<std::string> stop_strings_;
  size_t printed_ = 0;  // bytes of the text already returned
};

}  // namespace finetune
