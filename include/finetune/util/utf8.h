// UTF-8 <-> code points, the small part of Unicode handling every tokenizer stage needs.
// Invalid bytes decode to U+FFFD one byte at a time (as Rust's String::from_utf8_lossy does per
// maximal invalid subsequence, close enough for text that was valid UTF-8 on input).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace finetune {

std::vector<char32_t> utf8_decode(const std::string& text);
void utf8_append(std::string& out, char32_t code_point);
std::string utf8_encode(const std::vector<char32_t>& code_points);

// Length in bytes of the UTF-8 sequence that starts with `lead` (1 for invalid lead bytes).
size_t utf8_sequence_length(unsigned char lead);

// Rust's char::is_whitespace (Unicode White_Space), used by added-token lstrip/rstrip.
bool is_unicode_whitespace(char32_t c);

}  // namespace finetune
