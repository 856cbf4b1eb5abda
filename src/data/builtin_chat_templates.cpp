// The built-in chat templates (see builtin_chat_templates.h). Rendered without their
// {% generation %} tags they equal, character for character, the templates they are named after
// (tests/data/test_builtin_chat_templates.cpp renders both through transformers' Jinja setup).
#include "finetune/data/builtin_chat_templates.h"

namespace finetune {
namespace {

// Text of a message's content: a string as is; a list of parts, its text parts in order.
#define FINETUNE_CONTENT_MACRO                                                          \
  "{%- macro content_text(content) -%}"                                                 \
  "{%- if content is string -%}{{ content }}"                                           \
  "{%- elif content is iterable and content is not mapping -%}"                         \
  "{%- for part in content if part is mapping and part.type == 'text' -%}{{ part.text }}{%- endfor -%}" \
  "{%- else -%}{{ raise_exception('message content must be a string or a list of parts') }}" \
  "{%- endif -%}"                                                                       \
  "{%- endmacro -%}"

// ChatML's messages and generation prompt: "<|im_start|>{role}\n{content}<|im_end|>\n".
#define FINETUNE_CHATML_MESSAGES                                                                          \
  "{%- for message in messages -%}"                                                                      \
  "{{- '<|im_start|>' + message.role + '\\n' -}}"                                                        \
  "{%- if message.role == 'assistant' -%}"                                                               \
  "{%- generation -%}{{- content_text(message.content) + '<|im_end|>' -}}{%- endgeneration -%}"          \
  "{%- else -%}{{- content_text(message.content) + '<|im_end|>' -}}{%- endif -%}"                        \
  "{{- '\\n' -}}"                                                                                         \
  "{%- endfor -%}"                                                                                       \
  "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"

const char kChatMl[] = FINETUNE_CONTENT_MACRO FINETUNE_CHATML_MESSAGES;

const char kQwen25[] = FINETUNE_CONTENT_MACRO
    "{%- if messages[0].role != 'system' -%}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' -}}"
    "{%- endif -%}" FINETUNE_CHATML_MESSAGES;

const char kLlama3[] = FINETUNE_CONTENT_MACRO
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' -}}"
    "{%- if message.role == 'assistant' -%}"
    "{%- generation -%}{{- content_text(message.content) | trim + '<|eot_id|>' -}}{%- endgeneration -%}"
    "{%- else -%}{{- content_text(message.content) | trim + '<|eot_id|>' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}";

const char kMistral[] = FINETUNE_CONTENT_MACRO
    "{%- if messages[0].role == 'system' -%}"
    "{%- set system_message = content_text(messages[0].content) -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{{- bos_token -}}"
    "{%- for message in loop_messages -%}"
    "{%- if (message.role == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{- raise_exception('After the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/...') -}}"
    "{%- endif -%}"
    "{%- if message.role == 'user' -%}"
    "{%- if loop.first and system_message is defined -%}"
    "{{- ' [INST] ' + system_message + '\\n\\n' + content_text(message.content) + ' [/INST]' -}}"
    "{%- else -%}{{- ' [INST] ' + content_text(message.content) + ' [/INST]' -}}{%- endif -%}"
    "{%- elif message.role == 'assistant' -%}"
    "{%- generation -%}{{- ' ' + content_text(message.content) + eos_token -}}{%- endgeneration -%}"
    "{%- else -%}"
    "{{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional "
    "system message!') -}}"
    "{%- endif -%}"
    "{%- endfor -%}";

#undef FINETUNE_CHATML_MESSAGES
#undef FINETUNE_CONTENT_MACRO

}  // namespace

const std::vector<BuiltinChatTemplate>& builtin_chat_templates() {
  static const std::vector<BuiltinChatTemplate> templates = {
      {"chatml", kChatMl}, {"qwen2.5", kQwen25}, {"llama3", kLlama3}, {"mistral", kMistral}};
  return templates;
}

const std::vector<std::pair<std::string, std::string>>& builtin_chat_template_aliases() {
  static const std::vector<std::pair<std::string, std::string>> aliases = {
      {"qwen2", "qwen2.5"}, {"qwen", "qwen2.5"}, {"llama-3", "llama3"}};
  return aliases;
}

const BuiltinChatTemplate* find_builtin_chat_template(const std::string& name) {
  std::string canonical = name;
  for (const auto& [alias, target] : builtin_chat_template_aliases()) {
    if (name == alias) canonical = target;
  }
  for (const BuiltinChatTemplate& builtin : builtin_chat_templates()) {
    if (builtin.name == canonical) return &builtin;
  }
  return nullptr;
}

}  // namespace finetune
