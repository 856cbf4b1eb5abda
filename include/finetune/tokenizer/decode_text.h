// Text clean-ups shared by the decoders: lossy UTF-8 repair (Rust's String::from_utf8_lossy, which
// tokenizers' ByteLevel decoder applies) and transformers' clean_up_tokenization_spaces.
#pragma once

#include <string>

namespace finetune {

// Each maximal invalid UTF-8 subsequence -> U+FFFD; valid text is returned unchanged.
std::string utf8_lossy(const std::string& bytes);

// transformers' clean_up_tokenization: " ." -> ".", " n't" -> "n't", ... (only when the config's
// clean_up_tokenization_spaces is true).
std::string clean_up_tokenization(const std::string& text);

}  // namespace finetune
