// Row formats: detection and tokenization of one row (see dataset_formats.h).
#include "finetune/data/dataset_formats.h"

#include <cstdint>
#include <limits>

#include "finetune/data/chat_tokenization.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

using nlohmann::ordered_json;

const std::string& string_field(const ordered_json& object, const std::string& key, const std::string& where = "") {
  const auto it = object.find(key);
  if (it == object.end()) throw Error(where + "missing field \"" + key + "\"");
  if (!it->is_string()) {
    throw Error(where + "field \"" + key + "\" must be a string, got " + std::string(it->type_name()));
  }
  return it->get_ref<const std::string&>();
}

const ordered_json& array_field(const ordered_json& object, const std::string& key) {
  const auto it = object.find(key);
  if (it == object.end()) throw Error("missing field \"" + key + "\"");
  if (!it->is_array()) throw Error("field \"" + key + "\" must be an array, got " + std::string(it->type_name()));
  return *it;
}

std::string sharegpt_role(const std::string& from, const std::string& where) {
  static const std::pair<const char*, const char*> kRoles[] = {
      {"human", "user"},         {"user", "user"},       {"gpt", "assistant"},   {"assistant", "assistant"},
      {"model", "assistant"},    {"chatgpt", "assistant"}, {"bing", "assistant"}, {"bard", "assistant"},
      {"system", "system"},      {"tool", "tool"},       {"function_response", "tool"}, {"observation", "tool"}};
  for (const auto& [name, role] : kRoles) {
    if (from == name) return role;
  }
  throw Error(where + "field \"from\" is \"" + from +
              "\"; expected human/user, gpt/assistant/model, system, or tool/function_response/observation");
}

// The list under `key` checked message by message: objects with a string role (sharegpt: "from"
// mapped to "role", "value" to "content"; other keys kept).
ordered_json read_messages(const ordered_json& row, const std::string& key, bool sharegpt) {
  const ordered_json& list = array_field(row, key);
  if (list.empty()) throw Error("field \"" + key + "\" is an empty list");
  ordered_json messages = ordered_json::array();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = key + "[" + std::to_string(i) + "]: ";
    const ordered_json& entry = list[i];
    if (!entry.is_object()) throw Error(where + "must be an object, got " + std::string(entry.type_name()));
    if (!sharegpt) {
      string_field(entry, "role", where);
      messages.push_back(entry);
      continue;
    }
    ordered_json message = ordered_json::object();
    message["role"] = sharegpt_role(string_field(entry, "from", where), where);
    message["content"] = string_field(entry, "value", where);
    for (const auto& [name, value] : entry.items()) {
      if (name != "from" && name != "value") message[name] = value;
    }
    messages.push_back(std::move(message));
  }
  return messages;
}

// Row-level extras shared by conversational formats.
void read_extras(const ordered_json& row, Conversation& conversation) {
  if (const auto tools = row.find("tools"); tools != row.end() && !tools->is_null()) {
    conversation.tools = tools->is_string() ? parse_ordered_json(tools->get_ref<const std::string&>(), "field \"tools\"")
                                            : *tools;
    if (!conversation.tools.is_array()) throw Error("field \"tools\" must be a list (or a JSON string of one)");
  }
  if (const auto documents = row.find("documents"); documents != row.end() && !documents->is_null()) {
    conversation.documents = *documents;
  }
  if (const auto kwargs = row.find("chat_template_kwargs"); kwargs != row.end() && !kwargs->is_null()) {
    if (!kwargs->is_object()) throw Error("field \"chat_template_kwargs\" must be an object");
    conversation.kwargs = *kwargs;
  }
}

const ChatTemplate& require_template(const RowTokenization& how, RowFormat format) {
  if (how.chat_template == nullptr) {
    throw Error(row_format_name(format) + " rows need a chat template (--chat_template auto, a built-in name or a file)");
  }
  return *how.chat_template;
}

Sample prompt_completion_row(const ordered_json& row, const RowTokenization& how) {
  const ordered_json& prompt = row.at("prompt");
  const ordered_json& completion = row.at("completion");
  if (prompt.is_string() && completion.is_string()) {
    return tokenize_text_prompt_completion(prompt.get_ref<const std::string&>(), completion.get_ref<const std::string&>(),
                                           *how.tokenizer, how.train_on_completions);
  }
  if (!prompt.is_array() || !completion.is_array()) {
    throw Error("fields \"prompt\" and \"completion\" must both be strings or both be message lists, got " +
                std::string(prompt.type_name()) + " and " + std::string(completion.type_name()));
  }
  Conversation conversation;
  conversation.messages = read_messages(row, "prompt", false);
  const ordered_json completion_messages = read_messages(row, "completion", false);
  read_extras(row, conversation);
  return tokenize_chat_prompt_completion(require_template(how, RowFormat::PromptCompletion), conversation,
                                         completion_messages, *how.tokenizer, how.train_on_completions);
}

// Token ids below `vocab_size` (0: any int32), or -100 where allowed.
std::vector<int32_t> int32_list(const ordered_json& list, const std::string& key, bool allow_ignore_index,
                                int64_t vocab_size) {
  std::vector<int32_t> values;
  values.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const ordered_json& value = list[i];
    if (!value.is_number_integer()) {
      throw Error("field \"" + key + "\"[" + std::to_string(i) + "] must be an integer, got " +
                  std::string(value.type_name()) + " " + json_excerpt(value));
    }
    // Unsigned values above int64's range would wrap (2^64 - 100 to -100): clamp them first.
    const bool fits_int64 = !value.is_number_unsigned() ||
                            value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    const int64_t id = fits_int64 ? value.get<int64_t>() : std::numeric_limits<int64_t>::max();
    const bool ignored = allow_ignore_index && id == kIgnoreIndex;
    const int64_t limit = vocab_size > 0 ? vocab_size : int64_t{std::numeric_limits<int32_t>::max()} + 1;
    if (!ignored && (id < 0 || id >= limit)) {
      throw Error("field \"" + key + "\"[" + std::to_string(i) + "] = " + json_excerpt(value) + " is not a token id" +
                  (allow_ignore_index ? " or -100" : "") +
                  (vocab_size > 0 ? " (the model's vocab_size is " + std::to_string(vocab_size) + ")" : ""));
    }
    values.push_back(static_cast<int32_t>(id));
  }
  return values;
}

}  // namespace

std::string row_format_name(RowFormat format) {
  switch (format) {
    case RowFormat::PreTokenized: return "pre-tokenized";
    case RowFormat::Messages: return "messages";
    case RowFormat::ShareGpt: return "sharegpt";
    case RowFormat::PromptCompletion: return "prompt/completion";
    case RowFormat::Alpaca: return "alpaca";
    case RowFormat::Text: return "text";
  }
  return "unknown";
}

std::optional<RowFormat> detect_row_format(const ordered_json& row) {
  if (!row.is_object()) return std::nullopt;
  if (row.contains("input_ids")) return RowFormat::PreTokenized;
  if (row.contains("messages")) return RowFormat::Messages;
  if (row.contains("conversations")) return RowFormat::ShareGpt;
  if (row.contains("prompt") && row.contains("completion")) return RowFormat::PromptCompletion;
  if (row.contains("instruction") && row.contains("output")) return RowFormat::Alpaca;
  if (row.contains("text")) return RowFormat::Text;
  return std::nullopt;
}

Conversation conversation_of_row(RowFormat format, const ordered_json& row) {
  if (format != RowFormat::Messages && format != RowFormat::ShareGpt) {
    throw Error(row_format_name(format) + " rows are not conversations");
  }
  Conversation conversation;
  conversation.messages = format == RowFormat::Messages ? read_messages(row, "messages", false)
                                                        : read_messages(row, "conversations", true);
  read_extras(row, conversation);
  return conversation;
}

// unsloth-cli.py's alpaca_prompt literal: a triple-quoted string inside a function, so every line
// after the first keeps the function body's four-space indentation.
std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  return "Below is an instruction that describes a task, paired with an input that provides further context. "
         "Write a response that appropriately completes the request.\n\n    ### Instruction:\n    " +
         instruction + "\n\n    ### Input:\n    " + input + "\n\n    ### Response:\n    ";
}

Sample tokenize_row(RowFormat format, const ordered_json& row, const RowTokenization& how) {
  if (!row.is_object()) throw Error("row must be a JSON object, got " + std::string(row.type_name()));
  if (format == RowFormat::PreTokenized) return pretokenized_row(row, how.vocab_size);
  if (how.tokenizer == nullptr) throw Error(row_format_name(format) + " rows need a tokenizer");
  switch (format) {
    case RowFormat::Messages:
    case RowFormat::ShareGpt:
      return tokenize_conversation(require_template(how, format), conversation_of_row(format, row), *how.tokenizer,
                                   how.train_on_completions);
    case RowFormat::PromptCompletion:
      return prompt_completion_row(row, how);
    case RowFormat::Alpaca: {
      const std::string input = row.contains("input") && !row["input"].is_null() ? string_field(row, "input") : "";
      return tokenize_text_prompt_completion(alpaca_prompt(string_field(row, "instruction"), input),
                                             string_field(row, "output"), *how.tokenizer, how.train_on_completions);
    }
    case RowFormat::Text:
      return tokenize_text(string_field(row, "text"), *how.tokenizer);
    case RowFormat::PreTokenized:
      break;
  }
  throw Error("unhandled row format " + row_format_name(format));
}

Sample pretokenized_row(const ordered_json& row, int64_t vocab_size) {
  if (!row.is_object()) throw Error("row must be a JSON object, got " + std::string(row.type_name()));
  Sample sample;
  sample.input_ids = int32_list(array_field(row, "input_ids"), "input_ids", /*allow_ignore_index=*/false, vocab_size);
  if (sample.input_ids.empty()) throw Error("field \"input_ids\" is an empty list");
  if (row.contains("labels")) {
    sample.labels = int32_list(array_field(row, "labels"), "labels", /*allow_ignore_index=*/true, vocab_size);
    if (sample.labels.size() != sample.input_ids.size()) {
      throw Error("field \"labels\" has " + std::to_string(sample.labels.size()) + " entries but \"input_ids\" has " +
                  std::to_string(sample.input_ids.size()));
    }
  } else {
    sample.labels = sample.input_ids;
  }
  return sample;
}

}  // namespace finetune
