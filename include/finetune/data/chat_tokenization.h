// Token ids and loss masks of templated conversations and of prompt/completion pairs, as TRL's
// SFTTrainer makes them (trl/trainer/sft_trainer.py, tokenize_fn):
//
// Conversations: input_ids = the tokens of the rendered conversation, encoded without the
// tokenizer's post-processor (apply_chat_template(tokenize=True): the template writes BOS itself).
// With assistant_only, labels are -100 outside the assistant turns, found
//   - from the template's {% generation %} blocks when it has them, exactly as transformers'
//     return_assistant_tokens_mask: for a generated span [s, e) of the text, every token from the
//     one holding character s to the one holding character e - 1;
//   - otherwise by per-turn prefix differences, TRL's prompt/completion rule applied to each
//     assistant message k: its tokens start where the tokens of messages[:k] rendered with the
//     generation prompt stop agreeing with the conversation's, and end where those of
//     messages[:k + 1] do. (A template that renders a turn differently once it is no longer the
//     last, like Qwen3's empty <think> block, can leave an earlier turn with few or no tokens.)
// Prompt/completion: the completion's tokens start where the tokens of the prompt alone stop
// agreeing with those of prompt + completion (TRL's common_prefix_length); conversational pairs
// render the prompt with the generation prompt; plain text pairs are encoded with the
// post-processor (BOS) and the completion gets EOS unless it already ends with it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "finetune/data/chat_template.h"
#include "finetune/data/sample.h"
#include "finetune/tokenizer/tokenizer.h"

namespace finetune {

Sample tokenize_conversation(const ChatTemplate& chat_template, const Conversation& conversation,
                             const Tokenizer& tokenizer, bool assistant_only);

// `prompt.messages` then the completion's messages; `completion_only`: labels -100 before the completion.
Sample tokenize_chat_prompt_completion(const ChatTemplate& chat_template, const Conversation& prompt,
                                       const nlohmann::ordered_json& completion_messages, const Tokenizer& tokenizer,
                                       bool completion_only);

Sample tokenize_text_prompt_completion(const std::string& prompt, const std::string& completion,
                                       const Tokenizer& tokenizer, bool completion_only);

// Text rows (language modelling): text + EOS unless it already ends with EOS, with the
// post-processor; every token trained on.
Sample tokenize_text(const std::string& text, const Tokenizer& tokenizer);

// Number of leading tokens the two sequences share (TRL's common_prefix_length).
size_t common_prefix_length(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

}  // namespace finetune
