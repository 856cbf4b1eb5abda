// Preference rows -> chosen/rejected token ids and labels, as TRL's DPOTrainer (see preference_rows.h).
#include "finetune/data/preference_rows.h"

#include <algorithm>

#include "finetune/data/chat_tokenization.h"
#include "finetune/data/dataset_formats.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

using nlohmann::ordered_json;

// The byte offset where each Unicode code point of UTF-8 `text` starts, then text.size(): Python
// indexes str by code point, and extract_prompt compares and cuts there.
std::vector<size_t> code_point_offsets(const std::string& text) {
  std::vector<size_t> offsets;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) offsets.push_back(i);
  }
  offsets.push_back(text.size());
  return offsets;
}

// A sequence of strings' code points or of a list's messages, indexed as Python does.
struct Items {
  const ordered_json* list = nullptr;  // message list, or null for a string
  std::string text;
  std::vector<size_t> offsets;

  explicit Items(const ordered_json& value) {
    if (value.is_string()) {
      text = value.get<std::string>();
      offsets = code_point_offsets(text);
    } else {
      list = &value;
    }
  }
  int64_t size() const { return static_cast<int64_t>(list ? list->size() : offsets.size() - 1); }
  bool same_item(const Items& other, int64_t i) const {
    if (list) return message(i) == other.message(i);
    return code_point(i) == other.code_point(i);
  }
  const ordered_json& message(int64_t i) const { return (*list)[static_cast<size_t>(i)]; }
  std::string code_point(int64_t i) const { return text_between(i, i + 1); }
  // Python's value[begin:end] with 0 <= begin <= end <= size().
  ordered_json slice(int64_t begin, int64_t end) const {
    if (!list) return text_between(begin, end);
    ordered_json out = ordered_json::array();
    for (int64_t i = begin; i < end; ++i) out.push_back(message(i));
    return out;
  }
  // Python's index resolution for a slice bound (negative counts from the end).
  int64_t resolve(int64_t index) const { return std::clamp(index < 0 ? index + size() : index, int64_t{0}, size()); }

 private:
  std::string text_between(int64_t begin, int64_t end) const {
    const size_t first = offsets[static_cast<size_t>(begin)];
    return text.substr(first, offsets[static_cast<size_t>(end)] - first);
  }
};

std::string kind_of(const ordered_json& value) {
  if (value.is_string()) return "a string";
  if (value.is_array()) return "a message list";
  return std::string("a ") + value.type_name();
}

const ordered_json& required_field(const ordered_json& row, const std::string& key) {
  const auto it = row.find(key);
  if (it == row.end() || it->is_null()) throw Error("preference row has no field \"" + key + "\"");
  if (!it->is_string() && !it->is_array()) {
    throw Error("field \"" + key + "\" must be a string or a message list, got " + std::string(it->type_name()));
  }
  return *it;
}

std::vector<int32_t> render_and_encode(const ChatTemplate& chat_template, const Conversation& conversation,
                                       bool add_generation_prompt, const Tokenizer& tokenizer) {
  return tokenizer.encode(chat_template.render(conversation, add_generation_prompt).text, /*add_special_tokens=*/false);
}

ordered_json concatenated(ordered_json first, const ordered_json& second) {
  for (const auto& message : second) first.push_back(message);
  return first;
}

// Full sequences of the conversational form: {prompt, prompt + chosen, prompt + rejected}.
std::vector<std::vector<int32_t>> conversational_sequences(const PreferenceExample& example, const ordered_json& row,
                                                           const ChatTemplate& chat_template, const Tokenizer& tokenizer) {
  const Conversation prompt = preference_conversation(example.prompt, row);
  Conversation chosen = prompt, rejected = prompt;
  chosen.messages = preference_conversation(concatenated(example.prompt, example.chosen), row).messages;
  rejected.messages = preference_conversation(concatenated(example.prompt, example.rejected), row).messages;
  return {render_and_encode(chat_template, prompt, true, tokenizer),
          render_and_encode(chat_template, chosen, false, tokenizer),
          render_and_encode(chat_template, rejected, false, tokenizer)};
}

std::vector<std::vector<int32_t>> text_sequences(const PreferenceExample& example, const Tokenizer& tokenizer) {
  const std::string eos = tokenizer.special_tokens().eos_token.value_or("");
  const auto with_eos = [&eos](const std::string& text) { return ends_with(text, eos) ? text : text + eos; };
  const std::string& prompt = example.prompt.get_ref<const std::string&>();
  return {tokenizer.encode(prompt, true),
          tokenizer.encode(prompt + with_eos(example.chosen.get_ref<const std::string&>()), true),
          tokenizer.encode(prompt + with_eos(example.rejected.get_ref<const std::string&>()), true)};
}

// DataCollatorForPreference for one sequence: prompt + completion, cut to max_length, labelled on the completion.
Sample truncated_row(const std::vector<int32_t>& prompt_ids, const std::vector<int32_t>& completion_ids,
                     const PreferenceTruncation& truncation) {
  Sample row;
  row.input_ids = prompt_ids;
  row.input_ids.insert(row.input_ids.end(), completion_ids.begin(), completion_ids.end());
  row.labels = row.input_ids;
  std::fill(row.labels.begin(), row.labels.begin() + static_cast<std::ptrdiff_t>(prompt_ids.size()), kIgnoreIndex);
  const auto length = static_cast<int64_t>(row.input_ids.size());
  if (!truncation.max_length || length <= *truncation.max_length) return row;
  const int64_t keep = *truncation.max_length;
  const int64_t begin = truncation.mode == TruncationMode::KeepStart ? 0 : length - keep;
  row.input_ids = std::vector<int32_t>(row.input_ids.begin() + begin, row.input_ids.begin() + begin + keep);
  row.labels = std::vector<int32_t>(row.labels.begin() + begin, row.labels.begin() + begin + keep);
  return row;
}

}  // namespace

TruncationMode truncation_mode_from_name(const std::string& name) {
  if (name == "keep_start") return TruncationMode::KeepStart;
  if (name == "keep_end") return TruncationMode::KeepEnd;
  throw UsageError("--truncation_mode must be keep_start or keep_end, got \"" + name + "\"");
}

PreferenceExample extract_prompt(const ordered_json& chosen, const ordered_json& rejected) {
  if (chosen.is_string() != rejected.is_string() || (!chosen.is_string() && !chosen.is_array()) ||
      (!rejected.is_string() && !rejected.is_array())) {
    throw Error("fields \"chosen\" and \"rejected\" must both be strings or both be message lists, got " +
                kind_of(chosen) + " and " + kind_of(rejected));
  }
  const Items c(chosen), r(rejected);
  const int64_t shared = std::min(c.size(), r.size());
  if (shared == 0) throw Error("cannot extract a prompt: field \"chosen\" or \"rejected\" is empty");
  // Python's loop variable: where the two first differ, else the last index compared.
  int64_t idx = shared - 1;
  for (int64_t i = 0; i < shared; ++i) {
    if (!c.same_item(r, i)) {
      idx = i;
      const int64_t before = i > 0 ? i - 1 : c.size() - 1;  // Python's chosen[idx - 1]
      if (!c.list && c.code_point(before) == " ") --idx;   // the space goes with the completions
      break;
    }
  }
  PreferenceExample example;
  example.prompt = c.slice(0, c.resolve(idx));
  example.chosen = c.slice(c.resolve(idx), c.size());
  example.rejected = r.slice(r.resolve(idx), r.size());
  return example;
}

PreferenceExample preference_example(const ordered_json& row) {
  if (!row.is_object()) throw Error("row must be a JSON object, got " + std::string(row.type_name()));
  const ordered_json& chosen = required_field(row, "chosen");
  const ordered_json& rejected = required_field(row, "rejected");
  const auto prompt = row.find("prompt");
  if (prompt == row.end() || prompt->is_null()) return extract_prompt(chosen, rejected);
  const ordered_json& explicit_prompt = required_field(row, "prompt");
  if (explicit_prompt.is_string() != chosen.is_string() || chosen.is_string() != rejected.is_string()) {
    throw Error("fields \"prompt\", \"chosen\" and \"rejected\" must all be strings or all be message lists, got " +
                kind_of(explicit_prompt) + ", " + kind_of(chosen) + " and " + kind_of(rejected));
  }
  return PreferenceExample{explicit_prompt, chosen, rejected};
}

bool is_conversational(const PreferenceExample& example) { return example.prompt.is_array(); }

Conversation preference_conversation(const ordered_json& messages, const ordered_json& row) {
  ordered_json carrier = ordered_json::object();
  carrier["messages"] = messages;
  for (const char* key : {"tools", "documents", "chat_template_kwargs"}) {
    if (const auto it = row.find(key); it != row.end()) carrier[key] = *it;
  }
  return conversation_of_row(RowFormat::Messages, carrier);
}

PreferenceTokens tokenize_preference(const PreferenceExample& example, const ordered_json& row,
                                     const ChatTemplate* chat_template, const Tokenizer& tokenizer) {
  std::vector<std::vector<int32_t>> sequences;
  if (is_conversational(example)) {
    if (chat_template == nullptr) {
      throw Error("conversational preference rows need a chat template (--chat_template auto, a built-in name or a file)");
    }
    sequences = conversational_sequences(example, row, *chat_template, tokenizer);
  } else {
    sequences = text_sequences(example, tokenizer);
  }
  const std::vector<int32_t>& prompt = sequences[0];
  const size_t prompt_length =
      std::min(common_prefix_length(prompt, sequences[1]), common_prefix_length(prompt, sequences[2]));
  PreferenceTokens tokens;
  tokens.prompt_ids.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(prompt_length));
  tokens.chosen_ids.assign(sequences[1].begin() + static_cast<std::ptrdiff_t>(prompt_length), sequences[1].end());
  tokens.rejected_ids.assign(sequences[2].begin() + static_cast<std::ptrdiff_t>(prompt_length), sequences[2].end());
  return tokens;
}

std::optional<PreferencePair> preference_pair(const PreferenceTokens& tokens, const PreferenceTruncation& truncation,
                                              int64_t group_id) {
  if (truncation.max_length && *truncation.max_length <= 0) {
    throw UsageError("--max_length must be positive, got " + std::to_string(*truncation.max_length));
  }
  if (truncation.max_length && truncation.mode == TruncationMode::KeepStart &&
      static_cast<int64_t>(tokens.prompt_ids.size()) >= *truncation.max_length) {
    return std::nullopt;
  }
  PreferencePair pair;
  pair.chosen = truncated_row(tokens.prompt_ids, tokens.chosen_ids, truncation);
  pair.rejected = truncated_row(tokens.prompt_ids, tokens.rejected_ids, truncation);
  pair.group_id = group_id;
  return pair;
}

std::vector<Sample> preference_batch_rows(const std::vector<PreferencePair>& pairs, const std::vector<int64_t>& indices) {
  std::vector<Sample> rows;
  rows.reserve(2 * indices.size());
  for (const bool chosen : {true, false}) {
    for (const int64_t index : indices) {
      if (index < 0 || index >= static_cast<int64_t>(pairs.size())) {
        throw Error("preference pair index " + std::to_string(index) + " out of range (" + std::to_string(pairs.size()) +
                    " pairs)");
      }
      const PreferencePair& pair = pairs[static_cast<size_t>(index)];
      rows.push_back(chosen ? pair.chosen : pair.rejected);
    }
  }
  return rows;
}

int64_t completion_token_count(const Sample& row) {
  return static_cast<int64_t>(std::count_if(row.labels.begin(), row.labels.end(),
                                            [](int32_t label) { return label != kIgnoreIndex; }));
}

}  // namespace finetune
