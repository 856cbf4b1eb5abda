// The built-in chat templates: named fallbacks for models whose tokenizer has no chat template
// (--chat_template NAME). Each is a Jinja template run by the same engine as a model's own, with
// {% generation %} markers around what is trained on (assistant content and its end-of-turn
// token), so their masks need no guessing:
//   chatml   "<|im_start|>{role}\n{content}<|im_end|>\n" per message; no default system prompt
//   qwen2.5  ChatML with Qwen2.5's default system prompt ("You are Qwen, created by Alibaba
//            Cloud. You are a helpful assistant.") when the first message is not a system message
//   llama3   Meta-Llama-3-Instruct: bos, "<|start_header_id|>{role}<|end_header_id|>\n\n" +
//            content|trim + "<|eot_id|>" per message
//   mistral  Mistral-7B-Instruct-v0.1: bos, " [INST] {user} [/INST]", " {assistant}" + eos; a
//            leading system message is folded into the first user turn; roles must alternate
// List-valued content (parts [{"type": "text", "text": ...}]) renders its text parts in order.
// The generation prompt of each is the next assistant header.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace finetune {

struct BuiltinChatTemplate {
  std::string name;
  std::string source;  // Jinja
};

const std::vector<BuiltinChatTemplate>& builtin_chat_templates();

// Other spellings accepted for a built-in name (alias -> name).
const std::vector<std::pair<std::string, std::string>>& builtin_chat_template_aliases();

// The built-in with this name or alias; nullptr if none.
const BuiltinChatTemplate* find_builtin_chat_template(const std::string& name);

}  // namespace finetune
