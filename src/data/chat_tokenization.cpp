// Conversations and prompt/completion pairs -> token ids and labels (see chat_tokenization.h).
#include "finetune/data/chat_tokenization.h"

#include <algorithm>

#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

using nlohmann::ordered_json;

std::vector<int32_t> encode_rendered(const Tokenizer& tokenizer, const std::string& text) {
  return tokenizer.encode(text, /*add_special_tokens=*/false);
}

Sample with_labels(std::vector<int32_t> ids) {
  Sample sample;
  sample.labels = ids;
  sample.input_ids = std::move(ids);
  return sample;
}

// labels[i] = -100 wherever trained[i] is false.
void mask_untrained(Sample& sample, const std::vector<bool>& trained) {
  for (size_t i = 0; i < sample.labels.size(); ++i) {
    if (!trained[i]) sample.labels[i] = kIgnoreIndex;
  }
}

// One past the UTF-8 character that starts at byte `pos`.
size_t next_character(const std::string& text, size_t pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  const size_t length = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : (lead & 0xF8) == 0xF0 ? 4 : 1;
  return std::min(text.size(), pos + length);
}

// transformers' char_to_token on the tokens `ids` of `text`: the index of the first token whose
// offsets hold the character at byte `pos`. The tokens before it are those on which the encoding
// of the text before the character agrees with `ids`; the next one holds the character, unless
// the encoding through the character adds no token there: then the token before absorbed it (an
// added token with rstrip, e.g. Phi-3.5's <|assistant|> taking the whitespace after it, whose
// offsets then cover that whitespace). A character split over several byte-level tokens is held
// by the first of them, as in tokenizers.
size_t token_holding(const Tokenizer& tokenizer, const std::string& text, const std::vector<int32_t>& ids, size_t pos) {
  const size_t before = common_prefix_length(encode_rendered(tokenizer, text.substr(0, pos)), ids);
  const std::vector<int32_t> through = encode_rendered(tokenizer, text.substr(0, next_character(text, pos)));
  const bool absorbed = before > 0 && through.size() <= before && common_prefix_length(through, ids) <= before;
  return absorbed ? before - 1 : before;
}

// transformers' return_assistant_tokens_mask for a generated span [begin, end): every token from
// the one holding character `begin` to the one holding character end - 1.
std::pair<size_t, size_t> span_tokens(const Tokenizer& tokenizer, const std::string& text,
                                      const std::vector<int32_t>& ids, size_t begin, size_t end) {
  size_t last_start = end - 1;  // the start of the span's last character
  while (last_start > begin && (static_cast<unsigned char>(text[last_start]) & 0xC0) == 0x80) --last_start;
  const size_t first = token_holding(tokenizer, text, ids, begin);
  const size_t last = token_holding(tokenizer, text, ids, last_start);
  return {std::min(first, ids.size()), std::min(ids.size(), std::max(first, last + 1))};
}

std::vector<bool> generation_mask(const Tokenizer& tokenizer, const RenderedChat& rendered,
                                  const std::vector<int32_t>& ids) {
  std::vector<bool> trained(ids.size(), false);
  for (const auto& [begin, end] : rendered.generation_spans) {
    if (begin >= end) continue;
    const auto [first, last] = span_tokens(tokenizer, rendered.text, ids, begin, end);
    std::fill(trained.begin() + static_cast<std::ptrdiff_t>(first), trained.begin() + static_cast<std::ptrdiff_t>(last),
              true);
  }
  return trained;
}

Conversation with_messages(const Conversation& conversation, ordered_json messages) {
  Conversation copy;
  copy.messages = std::move(messages);
  copy.tools = conversation.tools;
  copy.documents = conversation.documents;
  copy.kwargs = conversation.kwargs;
  return copy;
}

ordered_json first_messages(const ordered_json& messages, size_t count) {
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < count; ++i) out.push_back(messages[i]);
  return out;
}

bool is_assistant(const ordered_json& message) {
  if (!message.is_object()) return false;
  const auto role = message.find("role");
  return role != message.end() && role->is_string() && role->get_ref<const std::string&>() == "assistant";
}

// Per-turn prefix differences (chat_tokenization.h).
std::vector<bool> prefix_difference_mask(const ChatTemplate& chat_template, const Conversation& conversation,
                                         const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  std::vector<bool> trained(ids.size(), false);
  const ordered_json& messages = conversation.messages;
  for (size_t k = 0; k < messages.size(); ++k) {
    if (!is_assistant(messages[k])) continue;
    size_t first = 0;
    if (k > 0) {
      const RenderedChat prompt = chat_template.render(with_messages(conversation, first_messages(messages, k)), true);
      first = common_prefix_length(encode_rendered(tokenizer, prompt.text), ids);
    }
    const RenderedChat through =
        chat_template.render(with_messages(conversation, first_messages(messages, k + 1)), false);
    const size_t last = common_prefix_length(encode_rendered(tokenizer, through.text), ids);
    for (size_t i = first; i < last; ++i) trained[i] = true;
  }
  return trained;
}

}  // namespace

size_t common_prefix_length(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t limit = std::min(a.size(), b.size());
  size_t length = 0;
  while (length < limit && a[length] == b[length]) ++length;
  return length;
}

Sample tokenize_conversation(const ChatTemplate& chat_template, const Conversation& conversation,
                             const Tokenizer& tokenizer, bool assistant_only) {
  const RenderedChat rendered = chat_template.render(conversation, /*add_generation_prompt=*/false);
  Sample sample = with_labels(encode_rendered(tokenizer, rendered.text));
  if (!assistant_only) return sample;
  const bool markers = chat_template.has_generation_markers(!conversation.tools.is_null());
  mask_untrained(sample, markers ? generation_mask(tokenizer, rendered, sample.input_ids)
                                 : prefix_difference_mask(chat_template, conversation, tokenizer, sample.input_ids));
  return sample;
}

Sample tokenize_chat_prompt_completion(const ChatTemplate& chat_template, const Conversation& prompt,
                                       const ordered_json& completion_messages, const Tokenizer& tokenizer,
                                       bool completion_only) {
  const RenderedChat prompt_text = chat_template.render(prompt, /*add_generation_prompt=*/true);
  ordered_json all = prompt.messages;
  for (const auto& message : completion_messages) all.push_back(message);
  const RenderedChat whole = chat_template.render(with_messages(prompt, std::move(all)), false);
  Sample sample = with_labels(encode_rendered(tokenizer, whole.text));
  if (completion_only) {
    const size_t prompt_length = common_prefix_length(encode_rendered(tokenizer, prompt_text.text), sample.input_ids);
    std::fill(sample.labels.begin(), sample.labels.begin() + static_cast<std::ptrdiff_t>(prompt_length), kIgnoreIndex);
  }
  return sample;
}

Sample tokenize_text_prompt_completion(const std::string& prompt, const std::string& completion,
                                       const Tokenizer& tokenizer, bool completion_only) {
  const std::string eos = tokenizer.special_tokens().eos_token.value_or("");
  const std::string full_completion = ends_with(completion, eos) ? completion : completion + eos;
  Sample sample = with_labels(tokenizer.encode(prompt + full_completion, /*add_special_tokens=*/true));
  if (completion_only) {
    const size_t prompt_length = common_prefix_length(tokenizer.encode(prompt, true), sample.input_ids);
    std::fill(sample.labels.begin(), sample.labels.begin() + static_cast<std::ptrdiff_t>(prompt_length), kIgnoreIndex);
  }
  return sample;
}

Sample tokenize_text(const std::string& text, const Tokenizer& tokenizer) {
  const std::string eos = tokenizer.special_tokens().eos_token.value_or("");
  return with_labels(tokenizer.encode(ends_with(text, eos) ? text : text + eos, /*add_special_tokens=*/true));
}

}  // namespace finetune
