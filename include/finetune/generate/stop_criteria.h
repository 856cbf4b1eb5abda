// When a row stops: at an EOS id, at a stop string, or after max_new_tokens.
//
// Stop strings differ from transformers' StopStringCriteria in two ways, both on purpose: ours
// looks for the string anywhere in the decoded text of the new tokens (transformers matches token
// strings against the end of the sequence, prompt included, and so also stops when the prompt's
// tail plus the first new tokens form the string), and ours cuts the returned text before the
// stop string (transformers returns the tokens, stop string included). The token ids we return
// run through the token that completed the stop string, as transformers' do.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace finetune {

// Where the earliest of `stop_strings` begins in `text`, if any occurs.
std::optional<size_t> find_stop_string(const std::string& text, const std::vector<std::string>& stop_strings);

// The ids that end a row: the tokenizer's eos_token_id and those of generation_config.json's
// eos_token_id (an id or a list), else config.json's, in MODEL_DIR. Errors name the file.
std::set<int64_t> eos_token_ids(const std::string& model_dir, std::optional<int32_t> tokenizer_eos);

}  // namespace finetune
