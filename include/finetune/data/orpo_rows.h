// Preference rows as TRL 1.16's ORPOTrainer prepares them (trl/experimental/orpo/orpo_trainer.py:
// maybe_extract_prompt, maybe_apply_chat_template, tokenize_row, build_tokenized_answer), which is
// not DPOTrainer's path (data/preference_rows.h):
//
//   - the prompt is extracted (extract_prompt) when the row has none, or when its kind (string or
//     message list) differs from the completions';
//   - conversations become text first: the prompt rendered with the generation prompt (a prompt
//     ending with an assistant turn would need continue_final_message, which is refused), cut to
//     the characters it shares with the rendered prompt + chosen and prompt + rejected, whose
//     remainders are the completions;
//   - text is encoded WITHOUT the post-processor; each completion's tokens are those of prompt +
//     completion past the prompt's (one token earlier when the last prompt token merged across
//     the boundary); BOS is prepended unless the prompt already starts with it, EOS appended unless
//     the completion already ends with it;
//   - only the completion is truncated: to max_length minus the prompt's length (the prompt never
//     is, and nothing is dropped).
// Labels are -100 on the prompt. (ORPO's NLL term reads every non-padding token of the chosen row,
// prompt included; its log-probs only the labelled ones: train/preference_loss.h.)
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "finetune/data/chat_template.h"
#include "finetune/data/preference_rows.h"
#include "finetune/tokenizer/tokenizer.h"

namespace finetune {

// ORPOConfig.max_length's default.
constexpr int64_t kOrpoDefaultMaxLength = 1024;

// `chat_template` may be null for string rows only.
PreferencePair orpo_pair(const nlohmann::ordered_json& row, const ChatTemplate* chat_template,
                         const Tokenizer& tokenizer, int64_t max_length, int64_t group_id);

}  // namespace finetune
