#include "finetune/tokenizer/tokenizer_config.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "finetune/util/errors.h"
#include "finetune/util/file_contents.h"
#include "finetune/util/json_fields.h"
#include "finetune/util/json_parse.h"
#include "finetune/util/path_status.h"

namespace finetune {
namespace {

// A special token is written either as a string or as {"content": ..., "lstrip": ...}.
std::optional<std::string> token_text(const nlohmann::json& config, const std::string& key, const std::string& path) {
  const nlohmann::json* value = json_field(config, key, path, "<root>");
  if (!value) return std::nullopt;
  if (value->is_string()) return value->get<std::string>();
  if (value->is_object()) {
    auto content = value->find("content");
    if (content != value->end() && content->is_string()) return content->get<std::string>();
  }
  throw Error(path + ": field '" + key + "' must be a string or an object with a string 'content'");
}

std::optional<bool> optional_bool(const nlohmann::json& config, const std::string& key, const std::string& path) {
  const nlohmann::json* value = json_field(config, key, path, "<root>");
  if (!value) return std::nullopt;
  if (!value->is_boolean()) throw Error(path + ": field '" + key + "' must be true or false");
  return value->get<bool>();
}

// An added_tokens_decoder key: the token id in decimal, from 0 to 2^31 - 1.
int32_t token_id_key(const std::string& text, const std::string& path) {
  int64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9' || value > std::numeric_limits<int32_t>::max()) {
      value = -1;
      break;
    }
    value = value * 10 + (c - '0');
  }
  if (text.empty() || value < 0 || value > std::numeric_limits<int32_t>::max()) {
    throw Error(path + ": field 'added_tokens_decoder' has key '" + text + "', which is not a token id (0 to " +
                std::to_string(std::numeric_limits<int32_t>::max()) + ")");
  }
  return static_cast<int32_t>(value);
}

void fill_missing(std::optional<std::string>& slot, const std::optional<std::string>& value) {
  if (!slot && value) slot = value;
}

// chat_template is a string (the "default" template), or a list of {"name", "template"}.
ChatTemplates chat_templates_from(const nlohmann::json& value, const std::string& path) {
  if (value.is_string()) return {{"default", value.get<std::string>()}};
  if (value.is_array()) {
    ChatTemplates templates;
    for (const auto& entry : value) {
      const std::string name = entry.is_object() ? json_string(entry, "name", "", path, "chat_template[]") : "";
      const auto text = entry.is_object() ? entry.find("template") : entry.end();
      if (name.empty() || text == entry.end() || !text->is_string()) {
        throw Error(path + ": field 'chat_template' entries must be {\"name\": string, \"template\": string}");
      }
      templates[name] = text->get<std::string>();
    }
    return templates;
  }
  throw Error(path + ": field 'chat_template' must be a string or a list of {\"name\", \"template\"} entries");
}

// transformers 5 saves templates next to the config: chat_template.jinja (the default) and
// additional_chat_templates/<name>.jinja. When any exist they replace tokenizer_config.json's
// chat_template entirely (PreTrainedTokenizerBase.from_pretrained).
ChatTemplates template_files(const std::filesystem::path& model_dir) {
  namespace fs = std::filesystem;
  ChatTemplates templates;
  const fs::path default_file = model_dir / "chat_template.jinja";
  if (is_regular_file_at(default_file.string(), "the chat template")) {
    templates["default"] = read_file(default_file.string());
  }
  const fs::path extra_dir = model_dir / "additional_chat_templates";
  if (!is_directory_at(extra_dir.string(), "the chat templates")) return templates;
  std::error_code error;
  for (fs::directory_iterator it(extra_dir, error), end; !error && it != end; it.increment(error)) {
    if (it->path().extension() == ".jinja" && is_regular_file_at(it->path().string(), "the chat template")) {
      templates[it->path().stem().string()] = read_file(it->path().string());
    }
  }
  if (error) throw Error(extra_dir.string() + ": cannot list the chat templates (" + error.message() + ")");
  return templates;
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::string& model_dir) {
  namespace fs = std::filesystem;
  TokenizerConfig config;
  const std::string config_path = (fs::path(model_dir) / "tokenizer_config.json").string();
  if (exists_at(config_path, "the tokenizer config")) {
    const nlohmann::json json = read_json_file(config_path);
    if (!json.is_object()) throw Error(config_path + ": top level must be a JSON object");
    config.bos_token = token_text(json, "bos_token", config_path);
    config.eos_token = token_text(json, "eos_token", config_path);
    config.pad_token = token_text(json, "pad_token", config_path);
    config.unk_token = token_text(json, "unk_token", config_path);
    config.add_bos_token = optional_bool(json, "add_bos_token", config_path);
    config.add_eos_token = optional_bool(json, "add_eos_token", config_path);
    config.add_prefix_space = optional_bool(json, "add_prefix_space", config_path);
    config.legacy = optional_bool(json, "legacy", config_path).value_or(false);
    config.tokenizer_class = token_text(json, "tokenizer_class", config_path);
    config.clean_up_tokenization_spaces =
        optional_bool(json, "clean_up_tokenization_spaces", config_path).value_or(false);
    if (const auto* tmpl = json_field(json, "chat_template", config_path, "<root>")) {
      config.chat_templates = chat_templates_from(*tmpl, config_path);
    }
    if (const auto* decoder = json_field(json, "added_tokens_decoder", config_path, "<root>")) {
      if (!decoder->is_object()) throw Error(config_path + ": field 'added_tokens_decoder' must be an object");
      for (const auto& [id_text, entry] : decoder->items()) {
        const std::string where = "added_tokens_decoder." + id_text;
        const int32_t id = token_id_key(id_text, config_path);
        AddedToken token;
        try {
          token = added_token_from_json(entry, id);
        } catch (const std::exception& e) {
          throw Error(config_path + ": field '" + where + "' is malformed: " + e.what());
        }
        config.added_tokens_decoder.push_back(token);
      }
    }
  }
  const std::string map_path = (fs::path(model_dir) / "special_tokens_map.json").string();
  if (exists_at(map_path, "the special tokens map")) {
    const nlohmann::json json = read_json_file(map_path);
    if (!json.is_object()) throw Error(map_path + ": top level must be a JSON object");
    fill_missing(config.bos_token, token_text(json, "bos_token", map_path));
    fill_missing(config.eos_token, token_text(json, "eos_token", map_path));
    fill_missing(config.pad_token, token_text(json, "pad_token", map_path));
    fill_missing(config.unk_token, token_text(json, "unk_token", map_path));
  }
  ChatTemplates files = template_files(model_dir);
  if (!files.empty()) config.chat_templates = std::move(files);
  return config;
}

SpecialTokens resolve_special_tokens(const TokenizerConfig& config, const Tokenizer& tokenizer,
                                     const std::string& tokenizer_path) {
  SpecialTokens special;
  special.bos_token = config.bos_token;
  special.eos_token = config.eos_token;
  special.pad_token = config.pad_token;
  special.unk_token = config.unk_token;
  special.chat_templates = config.chat_templates;
  auto resolve = [&](const std::optional<std::string>& token, const char* field) -> std::optional<int32_t> {
    if (!token) return std::nullopt;
    auto id = tokenizer.token_to_id(*token);
    if (!id) {
      throw Error(tokenizer_path + ": " + field + " '" + *token +
                  "' (from tokenizer_config.json / special_tokens_map.json) is not in the vocabulary");
    }
    return id;
  };
  special.bos_token_id = resolve(config.bos_token, "bos_token");
  special.eos_token_id = resolve(config.eos_token, "eos_token");
  special.pad_token_id = resolve(config.pad_token, "pad_token");
  return special;
}

}  // namespace finetune
