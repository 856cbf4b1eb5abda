// Preference rows (chosen/rejected pairs) as TRL 1.16's DPOTrainer prepares them
// (trl/trainer/dpo_trainer.py: _prepare_dataset, tokenize_fn, DataCollatorForPreference):
//
//   explicit prompt   {"prompt", "chosen", "rejected"}: all strings, or all message lists
//   implicit prompt   {"chosen", "rejected"}: the prompt is their longest common prefix (TRL's
//                     extract_prompt: of characters for strings, of messages for conversations)
//   plus, for conversations, "tools" and "chat_template_kwargs" as in messages rows.
//
// Tokenization (tokenize_fn): strings get EOS appended to chosen and rejected unless they end with
// it, then prompt, prompt + chosen and prompt + rejected are encoded with the post-processor (BOS);
// conversations render prompt (with the generation prompt), prompt + chosen and prompt + rejected
// through the chat template and encode without the post-processor (apply_chat_template(tokenize=True)).
// The completions start where the prompt's tokens stop agreeing with either full sequence
// (the smaller of the two common prefix lengths), and the prompt is cut there.
//
// Truncation and masking (the collator): each sequence prompt + completion is cut to max_length
// (keep_start: its first max_length tokens; keep_end: its last), and only completion tokens carry
// labels (-100 on the prompt). With keep_start, a pair whose prompt alone has max_length tokens or
// more is dropped (TRL filters it out before training).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "finetune/data/chat_template.h"
#include "finetune/data/sample.h"
#include "finetune/tokenizer/tokenizer.h"

namespace finetune {

enum class TruncationMode { KeepStart, KeepEnd };

// "keep_start" / "keep_end" (DPOConfig.truncation_mode); UsageError otherwise.
TruncationMode truncation_mode_from_name(const std::string& name);

struct PreferenceTruncation {
  std::optional<int64_t> max_length = 1024;  // nullopt: no truncation (DPOConfig's default is 1024)
  TruncationMode mode = TruncationMode::KeepStart;
};

// A row's prompt, chosen and rejected: three strings, or three message lists.
struct PreferenceExample {
  nlohmann::ordered_json prompt;
  nlohmann::ordered_json chosen;
  nlohmann::ordered_json rejected;
};

// TRL's extract_prompt on two strings (compared by Unicode code point) or two message lists.
PreferenceExample extract_prompt(const nlohmann::ordered_json& chosen, const nlohmann::ordered_json& rejected);

// The example of a row: its "prompt" when it has one, else extract_prompt. Throws Error naming the
// field when the three are not all strings or all message lists.
PreferenceExample preference_example(const nlohmann::ordered_json& row);

bool is_conversational(const PreferenceExample& example);

// `messages` as a conversation with the row's "tools", "documents" and "chat_template_kwargs",
// read and checked as for messages rows (data/dataset_formats.h).
Conversation preference_conversation(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& row);

// tokenize_fn's output.
struct PreferenceTokens {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> chosen_ids;
  std::vector<int32_t> rejected_ids;
};

// `row` supplies "tools" and "chat_template_kwargs" for conversational examples; `chat_template`
// may be null for string examples only.
PreferenceTokens tokenize_preference(const PreferenceExample& example, const nlohmann::ordered_json& row,
                                     const ChatTemplate* chat_template, const Tokenizer& tokenizer);

// A chosen/rejected pair ready for training: labels are -100 outside the completion. Both rows of
// a pair share group_id, so batching keeps them in one micro-batch.
struct PreferencePair {
  Sample chosen;
  Sample rejected;
  int64_t group_id = 0;
};

// nullopt: the pair is dropped (keep_start with a prompt of max_length tokens or more).
std::optional<PreferencePair> preference_pair(const PreferenceTokens& tokens, const PreferenceTruncation& truncation,
                                              int64_t group_id);

// The rows of a micro-batch of pairs (`indices` into `pairs`): every chosen row, then every
// rejected row in the same order, TRL's [chosen, rejected] batch (train/dpo_objective.h).
std::vector<Sample> preference_batch_rows(const std::vector<PreferencePair>& pairs, const std::vector<int64_t>& indices);

// Number of completion tokens of a row (labels other than -100, the first position included): what
// the ipo loss divides its log-ratios by (TRL counts the unshifted completion_mask).
int64_t completion_token_count(const Sample& row);

}  // namespace finetune
