// The row formats of dataset files (see dataset.h): detection from a row's keys, and turning one
// row into a tokenized sample. Errors thrown here describe the offending field; the caller
// prefixes the row's location.
//
//   pre-tokenized      {"input_ids": [...], "labels": [...]?}  labels default to input_ids
//   messages           {"messages": [{"role", "content", ...}], "tools"?, "chat_template_kwargs"?}
//   sharegpt           {"conversations": [{"from", "value", ...}]}: from human/user -> user,
//                      gpt/assistant/model/chatgpt/bing/bard -> assistant, system -> system,
//                      tool/function_response/observation -> tool (Unsloth's standardize_sharegpt),
//                      then as messages
//   prompt/completion  {"prompt", "completion"}: strings (plain), or message lists (conversational)
//   alpaca             {"instruction", "input"?, "output"}: Unsloth CLI's alpaca prompt as the
//                      prompt, output as the completion (then as plain prompt/completion)
//   text               {"text"}: language modelling, every token trained on
// Checked in that order. Messages are handed to the chat template as they are (extra keys such as
// tool_calls, name or reasoning_content included; content may be a string, a list of parts
// [{"type": "text", "text": ...}], or null): the template decides what it accepts. "tools" may
// be a list or a JSON string of one (TRL reads both); "chat_template_kwargs" adds template
// variables for the row (e.g. {"enable_thinking": false}).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "finetune/data/chat_template.h"
#include "finetune/data/sample.h"
#include "finetune/tokenizer/tokenizer.h"

namespace finetune {

enum class RowFormat { PreTokenized, Messages, ShareGpt, PromptCompletion, Alpaca, Text };

std::string row_format_name(RowFormat format);

// nullopt if no format's keys are present or the row is not an object.
std::optional<RowFormat> detect_row_format(const nlohmann::ordered_json& row);

struct RowTokenization {
  const Tokenizer* tokenizer = nullptr;          // needed by every format but pre-tokenized
  const ChatTemplate* chat_template = nullptr;   // needed by messages, sharegpt, conversational pairs
  bool train_on_completions = true;              // assistant turns / completions only
  int64_t vocab_size = 0;                        // pre-tokenized ids must be below it (0: unchecked)
};

Sample tokenize_row(RowFormat format, const nlohmann::ordered_json& row, const RowTokenization& how);

// The conversation of a messages or sharegpt row (roles mapped, tools and kwargs read).
Conversation conversation_of_row(RowFormat format, const nlohmann::ordered_json& row);

// Unsloth CLI's alpaca prompt, its literal as unsloth-cli.py formats it (every line after the first
// indented by four spaces): "Below is an instruction that describes a task, paired with an input
// that provides further context. Write a response that appropriately completes the
// request.\n\n    ### Instruction:\n    {}\n\n    ### Input:\n    {}\n\n    ### Response:\n    "
// (the same when input is empty, as Unsloth's CLI does); the output and EOS follow.
std::string alpaca_prompt(const std::string& instruction, const std::string& input);

// {"input_ids": [int...], "labels": [int...]?}: labels default to input_ids; labels must have the
// same length and hold token ids or -100. `vocab_size` > 0: every id (and label other than -100)
// must be below it.
Sample pretokenized_row(const nlohmann::ordered_json& row, int64_t vocab_size = 0);

}  // namespace finetune
