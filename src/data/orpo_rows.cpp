// Preference rows -> chosen/rejected token ids and labels, as TRL's ORPOTrainer (see orpo_rows.h).
#include "finetune/data/orpo_rows.h"

#include <algorithm>
#include <string>
#include <vector>

#include "finetune/util/errors.h"

namespace finetune {
namespace {

using nlohmann::ordered_json;

// maybe_extract_prompt: the row's prompt only when it is of the completions' kind.
PreferenceExample orpo_example(const ordered_json& row) {
  if (!row.is_object()) throw Error("row must be a JSON object, got " + std::string(row.type_name()));
  const auto prompt = row.find("prompt");
  const auto chosen = row.find("chosen");
  if (prompt == row.end() || prompt->is_null() || chosen == row.end() || prompt->is_array() == chosen->is_array()) {
    return preference_example(row);
  }
  ordered_json without_prompt = row;
  without_prompt.erase("prompt");
  return preference_example(without_prompt);
}

bool continuation_byte(const std::string& text, size_t pos) {
  return pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80;
}

// The longest common prefix of two UTF-8 strings in whole code points (Python's takewhile on str).
std::string common_text_prefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  while (n > 0 && (continuation_byte(a, n) || continuation_byte(b, n))) --n;
  return a.substr(0, n);
}

struct TextExample {
  std::string prompt, chosen, rejected;
};

// maybe_apply_chat_template for an explicit-prompt preference example.
TextExample rendered_example(const PreferenceExample& example, const ordered_json& row, const ChatTemplate* chat_template) {
  if (!is_conversational(example)) {
    return {example.prompt.get<std::string>(), example.chosen.get<std::string>(), example.rejected.get<std::string>()};
  }
  if (chat_template == nullptr) {
    throw Error("conversational preference rows need a chat template (--chat_template auto, a built-in name or a file)");
  }
  if (example.prompt.empty()) throw Error("field \"prompt\" is an empty list");
  const std::string last_role = example.prompt.back().value("role", "");
  if (last_role == "assistant") {
    throw Error("ORPO prompts ending with an assistant turn need continue_final_message, which is not supported");
  }
  if (last_role != "user" && last_role != "tool") throw Error("invalid role in the prompt's last message: " + last_role);
  const auto render = [&](const ordered_json& messages, bool generation_prompt) {
    return chat_template->render(preference_conversation(messages, row), generation_prompt).text;
  };
  const auto with = [&example](const ordered_json& completion) {
    ordered_json all = example.prompt;
    for (const auto& message : completion) all.push_back(message);
    return all;
  };
  const std::string prompt_chosen = render(with(example.chosen), false);
  const std::string prompt_rejected = render(with(example.rejected), false);
  const std::string prompt =
      common_text_prefix(common_text_prefix(render(example.prompt, true), prompt_chosen), prompt_rejected);
  return {prompt, prompt_chosen.substr(prompt.size()), prompt_rejected.substr(prompt.size())};
}

struct AnswerTokens {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> answer_ids;
};

// build_tokenized_answer: the answer's tokens are those of prompt + answer past the prompt's, one
// earlier when the prompt's last token merged with the answer.
AnswerTokens build_tokenized_answer(const Tokenizer& tokenizer, const std::string& prompt, const std::string& answer) {
  const std::vector<int32_t> full = tokenizer.encode(prompt + answer, /*add_special_tokens=*/false);
  const std::vector<int32_t> prompt_ids = tokenizer.encode(prompt, /*add_special_tokens=*/false);
  if (prompt_ids.size() > full.size()) throw Error("prompt input ids and answer input ids should have the same length");
  size_t start = prompt_ids.size();
  if (!std::equal(prompt_ids.begin(), prompt_ids.end(), full.begin())) --start;
  const auto split = full.begin() + static_cast<std::ptrdiff_t>(start);
  return {std::vector<int32_t>(full.begin(), split), std::vector<int32_t>(split, full.end())};
}

void check_prompts_agree(const AnswerTokens& chosen, const AnswerTokens& rejected) {
  size_t different = 0;
  for (size_t i = 0; i < std::min(chosen.prompt_ids.size(), rejected.prompt_ids.size()); ++i) {
    different += chosen.prompt_ids[i] != rejected.prompt_ids[i];
  }
  const size_t length_difference = chosen.prompt_ids.size() > rejected.prompt_ids.size()
                                       ? chosen.prompt_ids.size() - rejected.prompt_ids.size()
                                       : rejected.prompt_ids.size() - chosen.prompt_ids.size();
  if (different > 1 || length_difference > 1) {
    throw Error("chosen and rejected prompt tokens may only differ on the last token (tokenizer merges)");
  }
}

// BOS first unless there, EOS last unless there, the answer cut to max_length, labels on the answer.
Sample orpo_row(AnswerTokens tokens, const SpecialTokens& special, int64_t max_length) {
  if (special.bos_token_id && (tokens.prompt_ids.empty() || tokens.prompt_ids.front() != *special.bos_token_id)) {
    tokens.prompt_ids.insert(tokens.prompt_ids.begin(), *special.bos_token_id);
  }
  if (!special.eos_token_id) throw Error("ORPO rows need the tokenizer's eos_token_id");
  if (tokens.answer_ids.empty() || tokens.answer_ids.back() != *special.eos_token_id) {
    tokens.answer_ids.push_back(*special.eos_token_id);
  }
  const auto prompt_length = static_cast<int64_t>(tokens.prompt_ids.size());
  if (prompt_length + static_cast<int64_t>(tokens.answer_ids.size()) > max_length) {
    tokens.answer_ids.resize(static_cast<size_t>(std::max<int64_t>(0, max_length - prompt_length)));
  }
  Sample row;
  row.input_ids = tokens.prompt_ids;
  row.input_ids.insert(row.input_ids.end(), tokens.answer_ids.begin(), tokens.answer_ids.end());
  row.labels = row.input_ids;
  std::fill(row.labels.begin(), row.labels.begin() + prompt_length, kIgnoreIndex);
  return row;
}

}  // namespace

PreferencePair orpo_pair(const ordered_json& row, const ChatTemplate* chat_template, const Tokenizer& tokenizer,
                         int64_t max_length, int64_t group_id) {
  if (max_length <= 0) throw UsageError("--max_length must be positive, got " + std::to_string(max_length));
  const TextExample text = rendered_example(orpo_example(row), row, chat_template);
  const AnswerTokens chosen = build_tokenized_answer(tokenizer, text.prompt, text.chosen);
  const AnswerTokens rejected = build_tokenized_answer(tokenizer, text.prompt, text.rejected);
  check_prompts_agree(chosen, rejected);
  PreferencePair pair;
  pair.chosen = orpo_row(chosen, tokenizer.special_tokens(), max_length);
  pair.rejected = orpo_row(rejected, tokenizer.special_tokens(), max_length);
  pair.group_id = group_id;
  return pair;
}

}  // namespace finetune
