// Which Jinja chat template renders conversations (--chat_template), and rendering one.
//
// The template is executed by our Jinja engine (template/), exactly as transformers'
// apply_chat_template renders it: the context holds `messages`, `tools` and `documents` (None
// unless the row has them), `add_generation_prompt`, the tokenizer's special token strings
// (bos_token, eos_token, unk_token, pad_token, when set) and any extra keyword arguments
// (--chat_template_kwargs, then the row's own `chat_template_kwargs`, e.g. enable_thinking).
//
// --chat_template values:
//   auto        the tokenizer's own template (tokenizer_config.json's chat_template, or
//               chat_template.jinja); with tools, its "tool_use" template when it has one
//   a name      a built-in fallback (builtin_chat_templates.h): chatml, qwen2.5, llama3, mistral
//   a path      a .jinja file (any --chat_template value naming an existing file, or ending in
//               .jinja, is a path)
//   alpaca      no chat template: alpaca rows only, Unsloth CLI's prompt (dataset_formats.h)
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "finetune/tokenizer/tokenizer.h"

namespace finetune {

namespace jinja {
class Template;
}

// A conversation as a dataset row holds it; values are passed to the template unchanged.
struct Conversation {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;      // null: no tools
  nlohmann::ordered_json documents;  // null: no documents
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // extra template variables
};

struct RenderedChat {
  std::string text;
  // [begin, end) byte ranges of `text` produced inside {% generation %} blocks.
  std::vector<std::pair<size_t, size_t>> generation_spans;
};

class ChatTemplate {
 public:
  // `choice` as described above; `tokenizer_templates` the tokenizer's named templates.
  // `kwargs`: --chat_template_kwargs (an object). Throws UsageError for an unknown name, a
  // missing file, or "auto" when the tokenizer has no template; TemplateError for a template that
  // does not parse (naming the line).
  static ChatTemplate select(const std::string& choice, const ChatTemplates& tokenizer_templates,
                             const SpecialTokens& special_tokens, nlohmann::ordered_json kwargs);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // For the banner and logs, e.g. "the tokenizer's chat_template", "built-in chatml",
  // "file my_template.jinja"; with "(has {% generation %} markers)" when it does.
  std::string description() const;
  bool has_generation_markers(bool with_tools) const;

  RenderedChat render(const Conversation& conversation, bool add_generation_prompt) const;

 private:
  ChatTemplate(std::string description, std::shared_ptr<const jinja::Template> main,
               std::shared_ptr<const jinja::Template> tool_use, nlohmann::ordered_json globals);
  const jinja::Template& for_tools(bool with_tools) const;

  std::string description_;
  std::shared_ptr<const jinja::Template> main_;
  std::shared_ptr<const jinja::Template> tool_use_;  // null: main_ serves rows with tools too
  nlohmann::ordered_json globals_;                   // special tokens and --chat_template_kwargs
};

// Whether --chat_template names a template (built-in, file or auto) rather than "alpaca".
bool is_alpaca_choice(const std::string& choice);

// The names --chat_template accepts besides a file ("auto", the built-ins, "alpaca"), and the
// aliases of built-ins: the option parser and its help text read them from here.
std::vector<std::string> chat_template_names();
const std::vector<std::pair<std::string, std::string>>& chat_template_aliases();

}  // namespace finetune
