// The row formats of dataset files (see dataset.h): detection from a row's keys, and turning one
// row into text segments (or, pre-tokenized, directly into a sample). Errors thrown here describe
// the offending field; the caller prefixes the row's location.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "finetune/data/chat_template.h"
#include "finetune/data/sample.h"

namespace finetune {

enum class RowFormat { Alpaca, Messages, ShareGpt, Text, PreTokenized };

std::string row_format_name(RowFormat format);

// Checked in this order: "input_ids" -> PreTokenized, "messages" -> Messages, "conversations" ->
// ShareGpt, "instruction" and "output" -> Alpaca, "text" -> Text. nullopt if none match or the
// row is not an object.
std::optional<RowFormat> detect_row_format(const nlohmann::json& row);

// Renders a text-format row (every format but PreTokenized) into segments:
//   Alpaca    render_alpaca(instruction, input, output, eos); "input" may be absent (empty)
//   Messages  {"messages": [{"role", "content"}, ...]} through render_conversation
//   ShareGpt  {"conversations": [{"from", "value"}, ...]}, from human->user, gpt->assistant,
//             system->system, then as Messages
//   Text      the whole text + eos, all trainable
// Throws Error naming the missing or mistyped field.
std::vector<TextSegment> render_row(RowFormat format, const nlohmann::json& row, ChatFormat chat_format,
                                    const std::string& bos, const std::string& eos);

// {"input_ids": [int...], "labels": [int...]?}: labels default to input_ids; labels must have the
// same length and hold token ids or -100. Throws Error naming the field.
// `vocab_size` > 0: every id (and label other than -100) must be below it.
Sample pretokenized_row(const nlohmann::json& row, int64_t vocab_size = 0);

}  // namespace finetune
