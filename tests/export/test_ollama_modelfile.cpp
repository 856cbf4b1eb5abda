// The Modelfile beside a GGUF (export/ollama_modelfile.h): the whole text for each recognised
// chat template family, for an unrecognised template and for a model without one.
#include <gtest/gtest.h>

#include "../test_support.h"
#include "finetune/export/gguf_push.h"
#include "finetune/export/ollama_modelfile.h"

namespace finetune {
namespace {

using testing::TempDir;

TEST(OllamaModelfile, Llama3TemplateStopsAndSampling) {
  TempDir dir("modelfile");
  dir.write("tokenizer_config.json",
            R"({"eos_token": "<|eot_id|>", "chat_template": "{{ bos_token }}<|start_header_id|>{{ m }}<|end_header_id|>"})");
  dir.write("tokenizer.json", R"({"added_tokens": [{"id": 128001, "content": "<|end_of_text|>"},
                                                   {"id": 128009, "content": "<|eot_id|>"}]})");
  dir.write("generation_config.json",
            R"({"eos_token_id": [128001, 128009], "temperature": 0.6, "top_p": 0.9, "do_sample": true})");
  dir.write("config.json", R"({"eos_token_id": 128001})");
  const std::string expected =
      "FROM ./Llama-3.2-1B.Q4_K_M.gguf\n"
      "TEMPLATE \"\"\"{{- if .Messages }}\n"
      "{{- if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>\n{{- end }}\n"
      "{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>\n"
      "{{- end }}<|start_header_id|>assistant<|end_header_id|>\n\n"
      "{{ else -}}\n"
      "{{ if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>{{ end }}"
      "{{ if .Prompt }}<|start_header_id|>user<|end_header_id|>\n\n{{ .Prompt }}<|eot_id|>{{ end }}"
      "<|start_header_id|>assistant<|end_header_id|>\n\n{{ .Response }}<|eot_id|>\n"
      "{{- end -}}\"\"\"\n"
      "PARAMETER stop \"<|end_of_text|>\"\n"
      "PARAMETER stop \"<|eot_id|>\"\n"
      "PARAMETER stop \"<|start_header_id|>\"\n"
      "PARAMETER stop \"<|end_header_id|>\"\n"
      "PARAMETER temperature 0.6\n"
      "PARAMETER top_p 0.9\n";
  EXPECT_EQ(ollama_modelfile(dir.str(), "Llama-3.2-1B.Q4_K_M.gguf"), expected);
}

TEST(OllamaModelfile, ChatMlFromJinjaFileWithTopKAndRepeatPenalty) {
  TempDir dir("modelfile");
  dir.write("chat_template.jinja", "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}");
  dir.write("tokenizer_config.json", R"({"eos_token": {"content": "<|im_end|>"}})");
  dir.write("generation_config.json", R"({"top_k": 20, "repetition_penalty": 1.05})");
  const auto text = ollama_modelfile(dir.str(), "q.F16.gguf");
  EXPECT_EQ(text.substr(0, text.find('\n')), "FROM ./q.F16.gguf");
  EXPECT_NE(text.find("TEMPLATE \"\"\"{{- if .Messages }}\n{{- if .System }}<|im_start|>system\n"), std::string::npos);
  EXPECT_NE(text.find("\"\"\"\nPARAMETER stop \"<|im_end|>\"\nPARAMETER stop \"<|im_start|>\"\n"
                      "PARAMETER top_k 20\nPARAMETER repeat_penalty 1.05\n"),
            std::string::npos)
      << text;
}

TEST(OllamaModelfile, UnknownOrNoTemplateLeavesDetectionToOllama) {
  TempDir dir("modelfile");
  dir.write("tokenizer_config.json", R"({"eos_token": "</s>", "chat_template": "<start_of_turn>{{ m }}"})");
  EXPECT_EQ(ollama_modelfile(dir.str(), "g.Q8_0.gguf"), "FROM ./g.Q8_0.gguf\nPARAMETER stop \"</s>\"\n");
  TempDir bare("modelfile");
  EXPECT_EQ(ollama_modelfile(bare.str(), "b.F16.gguf"), "FROM ./b.F16.gguf\n");
}

TEST(OllamaModelfile, WrittenBesideTheGgufAndPushedWithIt) {
  TempDir model("modelfile");
  TempDir out("modelfile");
  const auto path = write_ollama_modelfile(model.str(), out.str(), "m.F16.gguf");
  EXPECT_EQ(path, out.file("Modelfile"));
  const std::vector<std::string> gguf = {out.file("m.F16.gguf"), out.file("m.Q8_0.gguf")};
  EXPECT_EQ(gguf_push_files(gguf), (std::vector<std::string>{"m.F16.gguf", "m.Q8_0.gguf", "Modelfile"}));
  TempDir lora("modelfile");
  EXPECT_EQ(gguf_push_files({lora.file("m.LoRA-F16.gguf")}), (std::vector<std::string>{"m.LoRA-F16.gguf"}));
}

}  // namespace
}  // namespace finetune
