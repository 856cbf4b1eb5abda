// The Ollama Modelfile written beside a model GGUF (as Unsloth's save_pretrained_gguf does), so
// `ollama create NAME -f SAVE_PATH/Modelfile` imports the file with the model's chat format:
//   FROM ./<gguf file name>
//   TEMPLATE, in Ollama's Go-template form, for the chat template families recognised in the
//     model's chat template (tokenizer_config.json's chat_template, else chat_template.jinja):
//     Llama-3 (<|start_header_id|>: Ollama's llama3-instruct), ChatML (<|im_start|>: chatml),
//     Mistral ([INST]: mistral-instruct). Any other template: no TEMPLATE line, and Ollama
//     matches the GGUF's tokenizer.chat_template against its own templates on import; no chat
//     template at all: none either (Ollama's default, the bare prompt).
//   PARAMETER stop: the end-of-sequence tokens (generation_config.json's and config.json's
//     eos_token_id, tokenizer_config.json's eos_token) and the family's turn markers (Ollama's
//     stop list for that template), each once, in that order;
//   PARAMETER temperature / top_p / top_k / repeat_penalty from generation_config.json's
//     temperature, top_p, top_k, repetition_penalty, where it sets them.
#pragma once

#include <string>

namespace finetune {

// The Modelfile's text for `gguf_file_name` (in the same directory) of the model whose config,
// tokenizer and generation files are in `model_dir`.
std::string ollama_modelfile(const std::string& model_dir, const std::string& gguf_file_name);

// Writes it atomically as `directory`/Modelfile; returns the path.
std::string write_ollama_modelfile(const std::string& model_dir, const std::string& directory,
                                   const std::string& gguf_file_name);

}  // namespace finetune
