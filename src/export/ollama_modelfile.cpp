#include "finetune/export/ollama_modelfile.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "finetune/util/atomic_file.h"
#include "finetune/util/errors.h"
#include "finetune/util/file_contents.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

// A chat template family Ollama ships a template for (ollama/template/*.gotmpl and its .json).
struct OllamaTemplate {
  const char* marker;  // a token only this family's chat template contains
  const char* go_template;
  std::vector<std::string> stop;
};

const std::vector<OllamaTemplate>& ollama_templates() {
  static const std::vector<OllamaTemplate> templates = {
      {"<|start_header_id|>",  // llama3-instruct
       "{{- if .Messages }}\n"
       "{{- if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>\n{{- end }}\n"
       "{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>\n"
       "{{- end }}<|start_header_id|>assistant<|end_header_id|>\n\n"
       "{{ else -}}\n"
       "{{ if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>{{ end }}"
       "{{ if .Prompt }}<|start_header_id|>user<|end_header_id|>\n\n{{ .Prompt }}<|eot_id|>{{ end }}"
       "<|start_header_id|>assistant<|end_header_id|>\n\n{{ .Response }}<|eot_id|>\n"
       "{{- end -}}",
       {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}},
      {"<|im_start|>",  // chatml
       "{{- if .Messages }}\n"
       "{{- if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}\n"
       "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"
       "{{ else }}\n"
       "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
       "{{ if .Prompt }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n{{ end }}"
       "<|im_start|>assistant\n{{ .Response }}<|im_end|>\n"
       "{{- end }}",
       {"<|im_start|>", "<|im_end|>"}},
      {"[INST]",  // mistral-instruct
       "{{- if .Messages }}\n"
       "{{- range $index, $_ := .Messages }}\n"
       "{{- if eq .Role \"user\" }}[INST] {{ if and $.System (eq (len (slice $.Messages $index)) 1) }}{{ $.System }}\n"
       "{{ end }}{{ .Content }}\n"
       "{{- else if eq .Role \"assistant\" }}[/INST] {{ .Content }}</s>\n"
       "{{- end }}\n"
       "{{- end }}[/INST]\n"
       "{{- else -}}\n"
       "[INST] {{ if .System }}{{ .System }} {{ end }}{{ .Prompt }}[/INST] {{ .Response }}</s>\n"
       "{{- end -}}",
       {"[INST]", "[/INST]"}},
  };
  return templates;
}

nlohmann::json json_or_empty(const std::filesystem::path& path) {
  return std::filesystem::exists(path) ? read_json_file(path.string()) : nlohmann::json::object();
}

std::string chat_template_text(const std::filesystem::path& dir, const nlohmann::json& tokenizer_config) {
  const auto it = tokenizer_config.find("chat_template");
  if (it != tokenizer_config.end() && it->is_string()) return it->get<std::string>();
  if (std::filesystem::exists(dir / "chat_template.jinja")) return read_file((dir / "chat_template.jinja").string());
  return "";
}

// A token's text: tokenizer_config.json's form (a string or {"content": ...}).
std::string token_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) return value["content"].get<std::string>();
  return "";
}

// The text of token `id` among tokenizer.json's added tokens (where special tokens live).
std::string added_token_text(const nlohmann::json& tokenizer, int64_t id) {
  if (!tokenizer.contains("added_tokens") || !tokenizer["added_tokens"].is_array()) return "";
  for (const auto& token : tokenizer["added_tokens"]) {
    if (token.value("id", int64_t{-1}) == id && token.contains("content")) return token["content"].get<std::string>();
  }
  return "";
}

void add_eos_ids(const nlohmann::json& config, const nlohmann::json& tokenizer, std::vector<std::string>& stop) {
  const auto it = config.find("eos_token_id");
  if (it == config.end()) return;
  std::vector<int64_t> ids;
  if (it->is_number_integer()) ids.push_back(it->get<int64_t>());
  if (it->is_array()) {
    for (const auto& id : *it) if (id.is_number_integer()) ids.push_back(id.get<int64_t>());
  }
  for (int64_t id : ids) stop.push_back(added_token_text(tokenizer, id));
}

std::vector<std::string> stop_tokens(const std::filesystem::path& dir, const nlohmann::json& tokenizer_config,
                                     const OllamaTemplate* family) {
  const auto tokenizer = json_or_empty(dir / "tokenizer.json");
  std::vector<std::string> candidates;
  add_eos_ids(json_or_empty(dir / "generation_config.json"), tokenizer, candidates);
  add_eos_ids(json_or_empty(dir / "config.json"), tokenizer, candidates);
  if (tokenizer_config.contains("eos_token")) candidates.push_back(token_text(tokenizer_config["eos_token"]));
  if (family) candidates.insert(candidates.end(), family->stop.begin(), family->stop.end());
  std::vector<std::string> stop;
  for (const auto& token : candidates) {
    if (!token.empty() && std::find(stop.begin(), stop.end(), token) == stop.end()) stop.push_back(token);
  }
  return stop;
}

// A Modelfile string argument: JSON's quoting, which Ollama's parser reads back.
std::string quoted(const std::string& text) { return nlohmann::json(text).dump(); }

void add_sampling_parameters(const nlohmann::json& generation, std::string& out) {
  const std::pair<const char*, const char*> names[] = {{"temperature", "temperature"},
                                                       {"top_p", "top_p"},
                                                       {"top_k", "top_k"},
                                                       {"repetition_penalty", "repeat_penalty"}};
  for (const auto& [hf_name, ollama_name] : names) {
    const auto it = generation.find(hf_name);
    if (it != generation.end() && it->is_number()) out += std::string("PARAMETER ") + ollama_name + " " + it->dump() + "\n";
  }
}

}  // namespace

std::string ollama_modelfile(const std::string& model_dir, const std::string& gguf_file_name) {
  const std::filesystem::path dir(model_dir);
  const auto tokenizer_config = json_or_empty(dir / "tokenizer_config.json");
  const auto chat_template = chat_template_text(dir, tokenizer_config);
  const OllamaTemplate* family = nullptr;
  for (const auto& candidate : ollama_templates()) {
    if (!family && chat_template.find(candidate.marker) != std::string::npos) family = &candidate;
  }
  std::string out = "FROM ./" + gguf_file_name + "\n";
  if (family) out += std::string("TEMPLATE \"\"\"") + family->go_template + "\"\"\"\n";
  for (const auto& token : stop_tokens(dir, tokenizer_config, family)) out += "PARAMETER stop " + quoted(token) + "\n";
  add_sampling_parameters(json_or_empty(dir / "generation_config.json"), out);
  return out;
}

std::string write_ollama_modelfile(const std::string& model_dir, const std::string& directory,
                                   const std::string& gguf_file_name) {
  const auto path = (std::filesystem::path(directory) / "Modelfile").string();
  write_file_atomically(path, ollama_modelfile(model_dir, gguf_file_name));
  return path;
}

}  // namespace finetune
