// Choosing and rendering the chat template (see chat_template.h).
#include "finetune/data/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "finetune/data/builtin_chat_templates.h"
#include "finetune/template/template.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

using nlohmann::ordered_json;

std::string read_template_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("--chat_template: cannot open template file " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string builtin_names() { return join(chat_template_names(), ", "); }

// The special tokens transformers passes to every template (its special_tokens_map): only those set.
ordered_json special_token_globals(const SpecialTokens& special) {
  ordered_json globals = ordered_json::object();
  const std::pair<const char*, const std::optional<std::string>*> tokens[] = {
      {"bos_token", &special.bos_token}, {"eos_token", &special.eos_token},
      {"unk_token", &special.unk_token}, {"pad_token", &special.pad_token}};
  for (const auto& [name, value] : tokens) {
    if (*value) globals[name] = **value;
  }
  return globals;
}

std::shared_ptr<const jinja::Template> compile(const std::string& source, const std::string& name) {
  return std::make_shared<const jinja::Template>(source, name);
}

}  // namespace

bool is_alpaca_choice(const std::string& choice) { return choice == "alpaca"; }

std::vector<std::string> chat_template_names() {
  std::vector<std::string> names = {"auto"};
  for (const BuiltinChatTemplate& builtin : builtin_chat_templates()) names.push_back(builtin.name);
  names.push_back("alpaca");
  return names;
}

const std::vector<std::pair<std::string, std::string>>& chat_template_aliases() {
  return builtin_chat_template_aliases();
}

ChatTemplate::ChatTemplate(std::string description, std::shared_ptr<const jinja::Template> main,
                           std::shared_ptr<const jinja::Template> tool_use, ordered_json globals)
    : description_(std::move(description)), main_(std::move(main)), tool_use_(std::move(tool_use)),
      globals_(std::move(globals)) {}

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

ChatTemplate ChatTemplate::select(const std::string& choice, const ChatTemplates& tokenizer_templates,
                                  const SpecialTokens& special_tokens, ordered_json kwargs) {
  if (!kwargs.is_null() && !kwargs.is_object()) {
    throw UsageError("--chat_template_kwargs must be a JSON object, e.g. '{\"enable_thinking\": false}'");
  }
  ordered_json globals = special_token_globals(special_tokens);
  if (kwargs.is_object()) {
    for (const auto& [key, value] : kwargs.items()) globals[key] = value;
  }
  if (choice == "auto") {
    const auto main = tokenizer_templates.find("default");
    if (main == tokenizer_templates.end()) {
      std::string names;
      for (const auto& [name, text] : tokenizer_templates) names += (names.empty() ? "" : ", ") + name;
      throw UsageError("--chat_template auto: the tokenizer has no default chat template" +
                       (names.empty() ? std::string() : " (it has: " + names + ")") +
                       "; choose one: " + builtin_names() + ", or a .jinja file");
    }
    const auto tool_use = tokenizer_templates.find("tool_use");
    return ChatTemplate("the tokenizer's chat_template", compile(main->second, "the tokenizer's chat_template"),
                        tool_use == tokenizer_templates.end()
                            ? nullptr
                            : compile(tool_use->second, "the tokenizer's tool_use chat template"),
                        std::move(globals));
  }
  if (const BuiltinChatTemplate* builtin = find_builtin_chat_template(choice)) {
    const std::string name = "built-in " + builtin->name + " template";
    return ChatTemplate("built-in " + builtin->name, compile(builtin->source, name), nullptr, std::move(globals));
  }
  if (is_alpaca_choice(choice)) {
    throw UsageError("--chat_template alpaca applies to instruction/input/output rows only; conversations need "
                     "a chat template: auto, a built-in name or a .jinja file");
  }
  std::error_code ec;  // a name too long for a path, or unreadable: not a file
  if (std::filesystem::is_regular_file(choice, ec) || ends_with(choice, ".jinja")) {
    const std::string name = "chat template file " + choice;
    return ChatTemplate("file " + choice, compile(read_template_file(choice), name), nullptr, std::move(globals));
  }
  throw UsageError("--chat_template: \"" + choice + "\" is neither a template name (" + builtin_names() +
                   ") nor an existing file");
}

std::string ChatTemplate::description() const {
  return description_ + (main_->has_generation_markers() ? " (with {% generation %} markers)" : "");
}

bool ChatTemplate::has_generation_markers(bool with_tools) const {
  return for_tools(with_tools).has_generation_markers();
}

const jinja::Template& ChatTemplate::for_tools(bool with_tools) const {
  return with_tools && tool_use_ ? *tool_use_ : *main_;
}

RenderedChat ChatTemplate::render(const Conversation& conversation, bool add_generation_prompt) const {
  ordered_json context = globals_;
  for (const auto& [key, value] : conversation.kwargs.items()) context[key] = value;
  context["messages"] = conversation.messages;
  context["tools"] = conversation.tools;
  context["documents"] = conversation.documents;
  context["add_generation_prompt"] = add_generation_prompt;
  jinja::Template::Output output = for_tools(!conversation.tools.is_null()).render(context);
  return RenderedChat{std::move(output.text), std::move(output.generation_spans)};
}

}  // namespace finetune
