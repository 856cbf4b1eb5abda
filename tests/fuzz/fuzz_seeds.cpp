#include "fuzz_seeds.h"

#include <cstdint>
#include <cstring>

#include <nlohmann/json.hpp>

#include "finetune/config/options.h"
#include "finetune/lora/lora_config.h"

namespace finetune::fuzz {
namespace {

using nlohmann::json;

std::string u64_le(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(value >> (8 * i));
  return bytes;
}

// A safetensors file: 8-byte length, header, then `data_size` bytes of a pattern.
std::string safetensors_bytes(const std::string& header, size_t data_size) {
  std::string data(data_size, '\0');
  for (size_t i = 0; i < data_size; ++i) data[i] = static_cast<char>(7 + 31 * i);
  return u64_le(header.size()) + header + data;
}

// Protobuf wire format, just enough to write a sentencepiece ModelProto.
void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}
void put_int(std::string& out, uint32_t field, int64_t value) {
  put_varint(out, field << 3);
  put_varint(out, static_cast<uint64_t>(value));  // negative int32 fields are sign-extended, as protobuf does
}
void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_varint(out, (field << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}
void put_float(std::string& out, uint32_t field, float value) {
  put_varint(out, (field << 3) | 5);
  char bytes[4];
  std::memcpy(bytes, &value, 4);
  out.append(bytes, 4);
}

std::string sentencepiece_model(bool with_user_defined) {
  struct Piece {
    const char* text;
    int type;  // 1 normal, 2 unknown, 3 control, 4 user defined
  };
  std::vector<Piece> pieces = {{"<unk>", 2}, {"<s>", 3}, {"</s>", 3}, {"\xE2\x96\x81", 1}, {"a", 1}, {"b", 1},
                               {"c", 1},     {"h", 1},   {"i", 1},    {"\xE2\x96\x81" "a", 1}, {"ab", 1},
                               {"abc", 1},   {"hi", 1},  {"\xE2\x96\x81" "hi", 1}};
  if (with_user_defined) pieces.push_back({"<tool>", 4});
  std::string model;
  float score = 0;
  for (const Piece& piece : pieces) {
    std::string entry;
    put_bytes(entry, 1, piece.text);
    put_float(entry, 2, piece.type == 1 ? score-- : 0.0f);
    put_int(entry, 3, piece.type);
    put_bytes(model, 1, entry);
  }
  std::string trainer;
  put_int(trainer, 3, 2);  // model_type BPE
  put_int(trainer, 4, static_cast<int64_t>(pieces.size()));
  put_int(trainer, 40, 0);   // unk_id
  put_int(trainer, 41, 1);   // bos_id
  put_int(trainer, 42, 2);   // eos_id
  put_int(trainer, 43, -1);  // pad_id
  put_bytes(model, 2, trainer);
  std::string normalizer;
  put_bytes(normalizer, 1, "identity");
  put_int(normalizer, 3, 1);  // add_dummy_prefix
  put_int(normalizer, 4, 1);  // remove_extra_whitespaces
  put_int(normalizer, 5, 1);  // escape_whitespaces
  put_bytes(model, 3, normalizer);
  return model;
}

std::vector<std::string> dumps(const std::vector<json>& values) {
  std::vector<std::string> out;
  for (const json& value : values) out.push_back(value.dump(out.size() % 2 == 0 ? -1 : 2));
  return out;
}

json tokenizer_json(int variant) {
  json vocab = json::object();
  int id = 0;
  for (const char* token : {"a", "b", "ab", "\xC4\xA0", "\xC4\xA0" "ab", "h", "i", "hi", "!", "\xC4\x8A"}) vocab[token] = id++;
  json added = json::array({{{"id", 10}, {"content", "<|eot|>"}, {"special", true}, {"lstrip", false},
                             {"rstrip", false}, {"normalized", false}, {"single_word", false}},
                            {{"id", 11}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                            {{"id", 12}, {"content", " tool"}, {"special", false}, {"lstrip", true},
                             {"rstrip", true}, {"single_word", true}, {"normalized", true}}});
  json model = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false},
                {"ignore_merges", variant == 2}, {"vocab", vocab},
                {"merges", variant == 1 ? json::array({"a b", "\xC4\xA0 ab", "h i"})
                                        : json::array({json::array({"a", "b"}), json::array({"\xC4\xA0", "ab"}),
                                                       json::array({"h", "i"})})}};
  json split = {{"type", "Split"}, {"pattern", {{"Regex", "(?i:'s|'t)| ?\\p{L}+| ?\\p{N}{1,3}|\\s+(?!\\S)|\\s+"}}},
                {"behavior", "Isolated"}, {"invert", false}};
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", variant == 1}, {"trim_offsets", true},
                     {"use_regex", variant != 0}};
  json template_processing = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", json::array({11})}, {"tokens", json::array({"<s>"})}}}}}};
  json root = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
               {"normalizer", variant == 0 ? json(nullptr) : json({{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}})},
               {"pre_tokenizer", variant == 2 ? byte_level : json({{"type", "Sequence"}, {"pretokenizers", json::array({split, byte_level})}})},
               {"post_processor", variant == 0 ? json(nullptr)
                                  : variant == 1 ? template_processing
                                                 : json({{"type", "Sequence"}, {"processors", json::array({byte_level, template_processing})}})},
               {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
               {"model", model}};
  if (variant == 2) {
    root["pre_tokenizer"] = {{"type", "Sequence"},
                             {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"String", "!"}}}, {"behavior", "Removed"}},
                                                            byte_level})}};
  }
  return root;
}

}  // namespace

const char* const kShardName = "model-00001-of-00001.safetensors";

std::string checkpoint_shard_bytes() {
  return safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]}})",
                           14);
}

std::vector<std::string> safetensors_header_seeds() {
  return {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]},)"
          R"("__metadata__":{"format":"pt"}})",
          R"({"w":{"dtype":"I64","shape":[2,2],"data_offsets":[0,32]},"z":{"dtype":"U8","shape":[0],"data_offsets":[32,32]},)"
          R"("h":{"dtype":"F16","shape":[1,3,1],"data_offsets":[32,38]},"t":{"dtype":"BOOL","shape":[2],"data_offsets":[38,40]}})",
          R"({"__metadata__":null,"s":{"dtype":"F64","shape":[],"data_offsets":[56,64]},"i":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})",
          "{}"};
}

std::vector<std::string> safetensors_file_seeds() {
  std::vector<std::string> files;
  for (const std::string& header : safetensors_header_seeds()) files.push_back(safetensors_bytes(header, 64));
  files.push_back(checkpoint_shard_bytes());
  return files;
}

std::vector<std::string> checkpoint_index_seeds() {
  return dumps({{{"metadata", {{"total_size", 14}}}, {"weight_map", {{"a", kShardName}, {"b", kShardName}}}},
                {{"weight_map", {{"b", kShardName}}}}});
}

std::vector<std::string> model_config_seeds() {
  const json llama = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 256},
                      {"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-5},
                      {"max_position_embeddings", 512}, {"rope_theta", 500000.0},
                      {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                        {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}},
                      {"tie_word_embeddings", true}, {"torch_dtype", "bfloat16"}, {"bos_token_id", 1},
                      {"eos_token_id", {2, 3}}, {"pad_token_id", nullptr}, {"hidden_act", "silu"},
                      {"attention_bias", false}, {"mlp_bias", false}, {"head_dim", 16}};
  const json qwen2 = {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"}, {"vocab_size", 300},
                      {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 1},
                      {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"use_sliding_window", false},
                      {"sliding_window", 4096}, {"max_window_layers", 28}, {"rope_theta", 1000000.0},
                      {"rope_scaling", nullptr}, {"torch_dtype", "float32"}, {"eos_token_id", 151643}};
  const json qwen3 = {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}, {"vocab_size", 300},
                      {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 8},
                      {"layer_types", {"full_attention", "full_attention"}},
                      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
                      {"dtype", "bfloat16"}, {"tie_word_embeddings", false}, {"rms_norm_eps", 1e-6}};
  const json mistral = {{"architectures", {"MistralForCausalLM"}}, {"vocab_size", 128}, {"hidden_size", 32},
                        {"intermediate_size", 64}, {"num_hidden_layers", 1}, {"num_attention_heads", 4},
                        {"num_key_value_heads", 1}, {"sliding_window", nullptr},
                        {"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}, {"torch_dtype", "float16"}};
  return dumps({llama, qwen2, qwen3, mistral});
}

std::string base_tokenizer_json() { return tokenizer_json(0).dump(); }

std::vector<std::string> tokenizer_json_seeds() { return dumps({tokenizer_json(0), tokenizer_json(1), tokenizer_json(2)}); }

std::vector<std::string> tokenizer_config_seeds() {
  const json token = {{"content", "<|eot|>"}, {"lstrip", false}, {"normalized", false}, {"rstrip", false},
                      {"single_word", false}, {"special", true}};
  return dumps({{{"bos_token", "<|eot|>"}, {"eos_token", token}, {"pad_token", nullptr}, {"unk_token", nullptr},
                 {"add_bos_token", true}, {"add_eos_token", false}, {"add_prefix_space", false}, {"legacy", false},
                 {"clean_up_tokenization_spaces", true}, {"model_max_length", 131072},
                 {"chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}"},
                 {"added_tokens_decoder", {{"10", token}, {"13", {{"content", "<new>"}, {"special", false}, {"normalized", true}}}}}},
                {{"eos_token", "<|eot|>"},
                 {"chat_template", json::array({{{"name", "default"}, {"template", "{{ bos_token }}"}},
                                                {{"name", "tool_use"}, {"template", "x"}}})},
                 {"tokenizer_class", "PreTrainedTokenizerFast"}}});
}

std::vector<std::string> special_tokens_map_seeds() {
  return dumps({{{"bos_token", "<|eot|>"}, {"eos_token", {{"content", "<|eot|>"}, {"lstrip", false}}}, {"pad_token", "<s>"},
                 {"unk_token", "a"}, {"additional_special_tokens", {"<|eot|>"}}}});
}

std::vector<std::string> sentencepiece_seeds() { return {sentencepiece_model(false), sentencepiece_model(true)}; }

std::vector<std::string> dataset_jsonl_seeds() {
  return {
      R"({"instruction": "Say hi", "input": "", "output": "hi"})" "\n" R"({"instruction": "Add", "input": "1 2", "output": "3"})" "\n",
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})" "\n"
      R"({"messages": [{"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}, {"role": "user", "content": "q3"}, {"role": "assistant", "content": "a3"}]})" "\n",
      R"({"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]})" "\n",
      R"({"text": "hello world"})" "\n\n" R"({"text": "second"})" "\n",
      R"({"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4]})" "\n" R"({"input_ids": [5, 6]})" "\n",
  };
}

std::vector<std::string> dataset_json_seeds() {
  std::vector<std::string> files;
  for (const std::string& jsonl : dataset_jsonl_seeds()) {
    std::string array = "[";
    size_t start = 0;
    for (size_t end = jsonl.find('\n'); end != std::string::npos; start = end + 1, end = jsonl.find('\n', start)) {
      if (end == start) continue;
      array += (array.size() > 1 ? ",\n" : "") + jsonl.substr(start, end - start);
    }
    files.push_back(array + "]");
  }
  return files;
}

// Every option the train command reads at its default (so every key and binding it takes is
// seeded), plus the two required ones.
std::vector<std::string> option_file_seeds() {
  json all = json::object();
  for (const OptionSpec& spec : option_table()) {
    if (!spec.read_by(Action::Train)) continue;  // e.g. dpo's --beta: a usage error on train
    const std::string& value = spec.default_value;
    if (spec.type == "int") {
      all[spec.name] = std::stoll(value);
    } else if (spec.type == "float" && value != "None") {  // None (TRL's unset float) stays text
      all[spec.name] = std::stod(value);
    } else if (spec.type == "bool") {
      all[spec.name] = value == "true";
    } else if (spec.type == "list") {
      json items = json::array();
      for (size_t start = 0; start < value.size();) {
        const size_t comma = value.find(',', start);
        items.push_back(value.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        start = comma == std::string::npos ? value.size() : comma + 1;
      }
      all[spec.name] = items;
    } else {
      all[spec.name] = value;
    }
  }
  all["model_name"] = "m";
  all["dataset"] = "d.jsonl";
  const json small = {{"model_name", "m"}, {"dataset", "d.jsonl"}, {"r", 8}, {"lora_alpha", 16},
                      {"target_modules", {"q_proj", "v_proj"}}, {"learning_rate", 2e-4}, {"packing", true},
                      {"max_steps", 10}, {"lr_scheduler_type", "cosine"}};
  return dumps({all, small});
}

std::vector<std::string> adapter_config_seeds() {
  LoraConfig config;
  config.r = 8;
  config.lora_alpha = 16;
  config.lora_dropout = 0.05;
  config.use_rslora = true;
  config.target_modules = {"q_proj", "v_proj"};
  json peft = adapter_config_json(config, "base/model");
  peft["layer_replication"] = nullptr;
  peft["loftq_config"] = json::object();
  peft["megatron_core"] = "megatron.core";
  return dumps({adapter_config_json(LoraConfig{}, ""), peft});
}

}  // namespace finetune::fuzz
