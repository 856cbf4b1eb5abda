// Row formats: detection and rendering of one row (see dataset_formats.h).
#include "finetune/data/dataset_formats.h"

#include <cstdint>
#include <limits>

#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

using nlohmann::json;

const std::string& string_field(const json& object, const std::string& key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) throw Error(where + "missing field \"" + key + "\"");
  if (!it->is_string()) {
    throw Error(where + "field \"" + key + "\" must be a string, got " + std::string(it->type_name()));
  }
  return it->get_ref<const std::string&>();
}

const json& array_field(const json& object, const std::string& key) {
  const auto it = object.find(key);
  if (it == object.end()) throw Error("missing field \"" + key + "\"");
  if (!it->is_array()) throw Error("field \"" + key + "\" must be an array, got " + std::string(it->type_name()));
  return *it;
}

std::string sharegpt_role(const std::string& from, const std::string& where) {
  if (from == "human") return "user";
  if (from == "gpt") return "assistant";
  if (from == "system") return "system";
  throw Error(where + "field \"from\" is \"" + from + "\"; expected human, gpt or system");
}

// Reads [{role_key, content_key}, ...] into messages; `map_role` turns the stored role into ours.
template <typename MapRole>
std::vector<ChatMessage> read_messages(const json& row, const std::string& list_key, const std::string& role_key,
                                       const std::string& content_key, MapRole map_role) {
  const json& list = array_field(row, list_key);
  if (list.empty()) throw Error("field \"" + list_key + "\" is an empty list");
  std::vector<ChatMessage> messages;
  messages.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = list_key + "[" + std::to_string(i) + "]: ";
    if (!list[i].is_object()) {
      throw Error(where + "must be an object, got " + std::string(list[i].type_name()));
    }
    std::string role = map_role(string_field(list[i], role_key, where), where);
    messages.push_back({std::move(role), string_field(list[i], content_key, where)});
  }
  return messages;
}

// Token ids below `vocab_size` (0: any int32), or -100 where allowed.
std::vector<int32_t> int32_list(const json& list, const std::string& key, bool allow_ignore_index, int64_t vocab_size) {
  std::vector<int32_t> values;
  values.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& value = list[i];
    if (!value.is_number_integer()) {
      throw Error("field \"" + key + "\"[" + std::to_string(i) + "] must be an integer, got " +
                  std::string(value.type_name()) + " " + json_excerpt(value));
    }
    // Unsigned values above int64's range would wrap (2^64 - 100 to -100): clamp them first.
    const bool fits_int64 =
        !value.is_number_unsigned() || value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    const int64_t id = fits_int64 ? value.get<int64_t>() : std::numeric_limits<int64_t>::max();
    const bool ignored = allow_ignore_index && id == kIgnoreIndex;
    const int64_t limit = vocab_size > 0 ? vocab_size : int64_t{std::numeric_limits<int32_t>::max()} + 1;
    if (!ignored && (id < 0 || id >= limit)) {
      throw Error("field \"" + key + "\"[" + std::to_string(i) + "] = " + json_excerpt(value) +
                  " is not a token id" + (allow_ignore_index ? " or -100" : "") +
                  (vocab_size > 0 ? " (the model's vocab_size is " + std::to_string(vocab_size) + ")" : ""));
    }
    values.push_back(static_cast<int32_t>(id));
  }
  return values;
}

}  // namespace

std::string row_format_name(RowFormat format) {
  switch (format) {
    case RowFormat::Alpaca: return "alpaca";
    case RowFormat::Messages: return "messages";
    case RowFormat::ShareGpt: return "sharegpt";
    case RowFormat::Text: return "text";
    case RowFormat::PreTokenized: return "pre-tokenized";
  }
  return "unknown";
}

std::optional<RowFormat> detect_row_format(const json& row) {
  if (!row.is_object()) return std::nullopt;
  if (row.contains("input_ids")) return RowFormat::PreTokenized;
  if (row.contains("messages")) return RowFormat::Messages;
  if (row.contains("conversations")) return RowFormat::ShareGpt;
  if (row.contains("instruction") && row.contains("output")) return RowFormat::Alpaca;
  if (row.contains("text")) return RowFormat::Text;
  return std::nullopt;
}

std::vector<TextSegment> render_row(RowFormat format, const json& row, ChatFormat chat_format, const std::string& bos,
                                    const std::string& eos) {
  if (!row.is_object()) throw Error("row must be a JSON object, got " + std::string(row.type_name()));
  switch (format) {
    case RowFormat::Alpaca: {
      const std::string& instruction = string_field(row, "instruction", "");
      const std::string input = row.contains("input") ? string_field(row, "input", "") : std::string();
      return render_alpaca(instruction, input, string_field(row, "output", ""), eos);
    }
    case RowFormat::Messages: {
      const auto same_role = [](const std::string& role, const std::string&) { return role; };
      return render_conversation(chat_format, read_messages(row, "messages", "role", "content", same_role), bos, eos);
    }
    case RowFormat::ShareGpt:
      return render_conversation(chat_format, read_messages(row, "conversations", "from", "value", sharegpt_role),
                                 bos, eos);
    case RowFormat::Text:
      return {TextSegment{string_field(row, "text", "") + eos, true}};
    case RowFormat::PreTokenized:
      break;
  }
  throw Error("render_row: pre-tokenized rows have no text to render");
}

Sample pretokenized_row(const json& row, int64_t vocab_size) {
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
