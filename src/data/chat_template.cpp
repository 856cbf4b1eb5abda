// Chat formats rendered by code; see chat_template.h for the exact template each one reproduces.
#include "finetune/data/chat_template.h"

#include <cstdint>

#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

const char kQwenDefaultSystemPrompt[] = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Decodes the UTF-8 code point starting at `pos` and sets `length` to its byte count. An invalid
// sequence yields kInvalidCodePoint with length 1 (never whitespace, so strip keeps it).
constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFF;

uint32_t decode_utf8_at(const std::string& text, size_t pos, size_t& length) {
  length = 1;
  const auto lead = static_cast<unsigned char>(text[pos]);
  if (lead < 0x80) return lead;
  const size_t extra = (lead & 0xE0) == 0xC0 ? 1 : (lead & 0xF0) == 0xE0 ? 2 : (lead & 0xF8) == 0xF0 ? 3 : 0;
  if (extra == 0 || pos + extra >= text.size()) return kInvalidCodePoint;
  uint32_t code = lead & (0x3F >> extra);
  for (size_t i = 1; i <= extra; ++i) {
    const auto next = static_cast<unsigned char>(text[pos + i]);
    if ((next & 0xC0) != 0x80) return kInvalidCodePoint;
    code = (code << 6) | (next & 0x3F);
  }
  length = extra + 1;
  return code;
}

// Python's str.isspace(): Unicode White_Space characters with bidi class WS/B/S or category Zs.
bool is_python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Appends a segment, merging it into the previous one when their trainability matches.
void append_segment(std::vector<TextSegment>& segments, std::string text, bool trainable) {
  if (text.empty()) return;
  if (!segments.empty() && segments.back().trainable == trainable) {
    segments.back().text += text;
  } else {
    segments.push_back({std::move(text), trainable});
  }
}

void check_roles(const std::vector<ChatMessage>& messages) {
  if (messages.empty()) throw Error("empty conversation: no messages to render");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      throw Error("message " + std::to_string(i) + " has role \"" + role +
                  "\"; supported roles are system, user and assistant");
    }
  }
}

// "<|im_start|>{role}\n{content}<|im_end|>\n"; the assistant's content and <|im_end|> are trainable.
void append_chatml_message(std::vector<TextSegment>& segments, const ChatMessage& message) {
  const bool assistant = message.role == "assistant";
  append_segment(segments, "<|im_start|>" + message.role + "\n", false);
  append_segment(segments, message.content + "<|im_end|>", assistant);
  append_segment(segments, "\n", false);
}

std::vector<TextSegment> render_chatml(const std::vector<ChatMessage>& messages, bool qwen_default_system) {
  std::vector<TextSegment> segments;
  if (qwen_default_system && messages.front().role != "system") {
    append_chatml_message(segments, {"system", kQwenDefaultSystemPrompt});
  }
  for (const ChatMessage& message : messages) append_chatml_message(segments, message);
  return segments;
}

std::vector<TextSegment> render_llama3(const std::vector<ChatMessage>& messages, const std::string& bos) {
  std::vector<TextSegment> segments;
  append_segment(segments, bos, false);
  for (const ChatMessage& message : messages) {
    append_segment(segments, "<|start_header_id|>" + message.role + "<|end_header_id|>\n\n", false);
    append_segment(segments, python_strip(message.content) + "<|eot_id|>", message.role == "assistant");
  }
  return segments;
}

std::vector<TextSegment> render_mistral(const std::vector<ChatMessage>& messages, const std::string& bos,
                                        const std::string& eos) {
  size_t first = 0;
  std::string system_message;
  const bool has_system = messages.front().role == "system";
  if (has_system) {
    system_message = messages.front().content;
    first = 1;
  }
  std::vector<TextSegment> segments;
  append_segment(segments, bos, false);
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    const bool expect_user = (i - first) % 2 == 0;
    if ((message.role == "user") != expect_user || message.role == "system") {
      throw Error("Mistral chat template: after the optional system message, conversation roles must "
                  "alternate user/assistant/user/assistant/... (message " + std::to_string(i) + " is " +
                  message.role + ")");
    }
    if (message.role == "user") {
      const std::string content = (i == first && has_system) ? system_message + "\n\n" + message.content
                                                             : message.content;
      append_segment(segments, " [INST] " + content + " [/INST]", false);
    } else {
      append_segment(segments, " " + message.content + eos, true);
    }
  }
  return segments;
}

}  // namespace

std::string python_strip(const std::string& text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t length = 0;
    if (!is_python_space(decode_utf8_at(text, begin, length))) break;
    begin += length;
  }
  size_t end = begin;  // one past the last non-space character
  for (size_t pos = begin; pos < text.size();) {
    size_t length = 0;
    const bool space = is_python_space(decode_utf8_at(text, pos, length));
    pos += length;
    if (!space) end = pos;
  }
  return text.substr(begin, end - begin);
}

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> names = {"auto", "chatml", "qwen2.5", "llama3", "mistral", "alpaca"};
  return names;
}

const std::vector<std::pair<std::string, std::string>>& chat_template_aliases() {
  static const std::vector<std::pair<std::string, std::string>> aliases = {
      {"qwen2", "qwen2.5"}, {"qwen", "qwen2.5"}, {"llama-3", "llama3"}};
  return aliases;
}

ChatFormat chat_format_from_name(const std::string& given_name, const std::string& tokenizer_chat_template) {
  std::string name = given_name;
  for (const auto& [alias, canonical] : chat_template_aliases()) {
    if (name == alias) name = canonical;
  }
  for (const ChatFormat format :
       {ChatFormat::ChatMl, ChatFormat::ChatMlQwen, ChatFormat::Llama3, ChatFormat::Mistral, ChatFormat::Alpaca}) {
    if (name == chat_format_name(format)) return format;
  }
  if (name != "auto") {
    throw UsageError("unknown chat template \"" + given_name + "\"; expected " + join(chat_template_names(), ", "));
  }
  const std::string& t = tokenizer_chat_template;
  if (contains(t, "<|im_start|>")) {
    return contains(t, kQwenDefaultSystemPrompt) ? ChatFormat::ChatMlQwen : ChatFormat::ChatMl;
  }
  if (contains(t, "<|start_header_id|>")) return ChatFormat::Llama3;
  if (contains(t, "[INST]")) return ChatFormat::Mistral;
  return ChatFormat::Alpaca;
}

std::string chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::ChatMl: return "chatml";
    case ChatFormat::ChatMlQwen: return "qwen2.5";
    case ChatFormat::Llama3: return "llama3";
    case ChatFormat::Mistral: return "mistral";
    case ChatFormat::Alpaca: return "alpaca";
  }
  return "unknown";
}

std::vector<TextSegment> render_conversation(ChatFormat format, const std::vector<ChatMessage>& messages,
                                             const std::string& bos, const std::string& eos) {
  check_roles(messages);
  switch (format) {
    case ChatFormat::ChatMl: return render_chatml(messages, /*qwen_default_system=*/false);
    case ChatFormat::ChatMlQwen: return render_chatml(messages, /*qwen_default_system=*/true);
    case ChatFormat::Llama3: return render_llama3(messages, bos);
    case ChatFormat::Mistral: return render_mistral(messages, bos, eos);
    case ChatFormat::Alpaca: break;
  }
  throw Error("conversation rows need a chat format (chatml, qwen2.5, llama3 or mistral); the alpaca "
              "format only applies to instruction/input/output rows. The tokenizer has no recognisable "
              "chat template: choose one explicitly");
}

std::vector<TextSegment> render_alpaca(const std::string& instruction, const std::string& input,
                                       const std::string& output, const std::string& eos) {
  std::string prompt =
      "Below is an instruction that describes a task, paired with an input that provides further context. "
      "Write a response that appropriately completes the request.\n\n### Instruction:\n" +
      instruction + "\n\n### Input:\n" + input + "\n\n### Response:\n";
  std::vector<TextSegment> segments;
  append_segment(segments, std::move(prompt), false);
  append_segment(segments, output + eos, true);
  return segments;
}

}  // namespace finetune
