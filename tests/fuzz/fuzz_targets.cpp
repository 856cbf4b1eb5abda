#include "fuzz_targets.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <stdexcept>

#include "../data/byte_tokenizer.h"
#include "finetune/io/model_config.h"
#include "finetune/config/options.h"
#include "finetune/data/chat_template.h"
#include "finetune/data/dataset.h"
#include "finetune/data/dataset_files.h"
#include "finetune/data/parquet_rows.h"
#include "finetune/io/safetensors.h"
#include "finetune/lora/lora_config.h"
#include "finetune/template/template.h"
#include "finetune/tokenizer/tokenizer.h"
#include "finetune/util/json_parse.h"
#include "fuzz_seeds.h"
#include "hub_answers_target.h"

namespace finetune::fuzz {
namespace {

// Text that exercises added tokens, byte-level and metaspace handling, NFC and the pre-tokenizers.
constexpr const char* kProbeText = "hi ab! <|eot|> a\xCC\x81 tool\n\xF0\x9F\x98\x80 <s>abc  x</s>";

std::string write_file(const std::string& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("fuzz harness: cannot write " + path);  // a harness failure, not a pass
  return path;
}

// Reads every byte of every tensor, so offsets that escaped validation show up as crashes.
uint64_t touch_tensors(const SafetensorsFile& file) {
  uint64_t sum = 0;
  for (const TensorInfo& info : file.tensors()) {
    const auto* bytes = static_cast<const unsigned char*>(file.data(info));
    for (uint64_t i = 0; i < info.end - info.begin; ++i) sum += bytes[i];
  }
  return sum;
}

void use_tokenizer(const Tokenizer& tokenizer) {
  for (const bool special : {false, true}) {
    const std::vector<int32_t> ids = tokenizer.encode(kProbeText, special);
    tokenizer.decode(ids, !special);
  }
  tokenizer.vocab_size();
  tokenizer.token_to_id("<|eot|>");
}

void run_safetensors_file(const std::string& input, const std::string& dir) {
  const SafetensorsFile file = SafetensorsFile::open(write_file(dir, "model.safetensors", input));
  touch_tensors(file);
  for (const TensorInfo& info : file.tensors()) file.at(info.name);
}

void run_safetensors_header(const std::string& input, const std::string& dir) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(static_cast<uint64_t>(input.size()) >> (8 * i));
  run_safetensors_file(bytes + input + std::string(64, '\x5A'), dir);
}

void run_checkpoint_index(const std::string& input, const std::string& dir) {
  write_file(dir, kShardName, checkpoint_shard_bytes());
  write_file(dir, "model.safetensors.index.json", input);
  const CheckpointFiles checkpoint = CheckpointFiles::open_dir(dir);
  for (const std::string& name : checkpoint.tensor_names()) checkpoint.info(name);
  for (const auto& file : checkpoint.files()) touch_tensors(*file);
}

void run_model_config(const std::string& input, const std::string& dir) {
  write_file(dir, "config.json", input);
  const ModelConfig config = load_model_config(dir);
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) (void)layer_is_sliding(config, layer);
}

void run_tokenizer_json(const std::string& input, const std::string& dir) {
  write_file(dir, "tokenizer.json", input);
  use_tokenizer(*load_tokenizer(dir));
}

void run_tokenizer_config(const std::string& input, const std::string& dir) {
  write_file(dir, "tokenizer.json", base_tokenizer_json());
  write_file(dir, "tokenizer_config.json", input);
  use_tokenizer(*load_tokenizer(dir));
}

void run_special_tokens_map(const std::string& input, const std::string& dir) {
  write_file(dir, "tokenizer.json", base_tokenizer_json());
  write_file(dir, "special_tokens_map.json", input);
  use_tokenizer(*load_tokenizer(dir));
}

void run_sentencepiece(const std::string& input, const std::string& dir) {
  write_file(dir, "tokenizer.model", input);
  use_tokenizer(*load_tokenizer(dir));
}

// A built-in chat template picked by the input's size, strict and with skip_bad_rows.
void run_dataset(const std::string& input, const std::string& path) {
  const data_test::ByteTokenizer tokenizer({"<|im_start|>", "<|im_end|>", "<s>", "</s>", "[INST]", "[/INST]"}, "<s>",
                                           "</s>", true);
  static const char* const kTemplates[] = {"chatml", "llama3", "mistral", "qwen2.5"};
  const ChatTemplate chat_template = ChatTemplate::select(
      kTemplates[input.size() % 4], {}, tokenizer.special_tokens(), nlohmann::ordered_json::object());
  DatasetOptions options;
  options.max_seq_length = 64;
  options.chat_template = &chat_template;
  options.train_on_completions = input.size() % 2 == 0;
  for (const bool skip : {true, false}) {
    options.skip_bad_rows = skip;
    load_dataset({path}, &tokenizer, options);
  }
}

void run_dataset_jsonl(const std::string& input, const std::string& dir) {
  run_dataset(input, write_file(dir, "data.jsonl", input));
}

void run_dataset_json(const std::string& input, const std::string& dir) {
  run_dataset(input, write_file(dir, "data.json", input));
}

// The rows as the reader hands them out, dumped (which throws on a string that is not UTF-8), then
// as for_each_dataset_row hands them to the dataset stage. Not load_dataset: most seeds (the
// all-types file) are no dataset format, and what load_dataset does with JSON rows is the
// dataset_jsonl target's.
void run_parquet_rows(const std::string& input, const std::string& dir) {
  const std::string path = write_file(dir, "data.parquet", input);
  for_each_parquet_row(path, [](int64_t, nlohmann::ordered_json row) { row.dump(); });
  for_each_dataset_row(path, [](const DatasetRow& row) { row.value.dump(); });
}

void run_option_file(const std::string& input, const std::string& dir) {
  const std::string path = write_file(dir, "run.json", input);
  const char* argv[] = {"finetune", "train", "--config", path.c_str()};
  parse_command(4, argv, EnvMap{});
}

// read_adapter_config (checkpoint/, LibTorch) is read_json_file + this.
void run_adapter_config(const std::string& input, const std::string& dir) {
  const std::string path = dir + "/adapter_config.json";
  const LoraConfig config = lora_config_from_adapter_json(parse_json(input, path), path);
  lora_scaling(config);
}

// A conversation with a system prompt, tools, a tool call and its result, and content parts.
const nlohmann::ordered_json& chat_context() {
  static const nlohmann::ordered_json kContext = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in x? \u00e9 \ud83d\ude00"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "x", "days": 2}}}]},
      {"role": "tool", "content": "sunny"},
      {"role": "assistant", "content": [{"type": "text", "text": "It is sunny."}]}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "documents": null, "add_generation_prompt": false, "bos_token": "<s>", "eos_token": "</s>"})");
  return kContext;
}

// A template as a tokenizer_config.json carries it: parsed, then rendered with and without the
// generation prompt. Tighter bounds than the defaults keep every input well within the
// per-input time limit; they exercise the same checks.
void run_chat_template(const std::string& input, const std::string&) {
  jinja::TemplateOptions options;
  options.max_iterations = 200000;
  options.max_output_bytes = 1 << 20;
  const jinja::Template chat_template(input, "fuzzed template", options);
  nlohmann::ordered_json context = chat_context();
  for (const bool prompt : {false, true}) {
    context["add_generation_prompt"] = prompt;
    chat_template.render(context);
  }
}

// Python's % operator in a template (jinja/python_format.cpp): "FORMAT\0ARGS", ARGS a JSON array
// (rendered as a tuple of its first 12 values), object (a mapping) or anything else (one value).
void run_percent_format(const std::string& input, const std::string&) {
  const size_t split = input.find('\0');
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["fmt"] = input.substr(0, split);
  context["a"] = split == std::string::npos
                     ? nlohmann::ordered_json()
                     : nlohmann::ordered_json::parse(input.substr(split + 1), nullptr, false);
  if (context["a"].is_discarded()) context["a"] = nullptr;
  std::string tuple;
  if (context["a"].is_array() && !context["a"].empty()) {
    for (size_t i = 0; i < std::min<size_t>(context["a"].size(), 12); ++i) tuple += "a[" + std::to_string(i) + "], ";
  }
  jinja::TemplateOptions options;
  options.max_output_bytes = 1 << 20;
  const std::string source = tuple.empty() ? "{{ fmt % a }}" : "{{ fmt % (" + tuple + ") }}";
  jinja::Template(source, "fuzzed format", options).render(context);
}

const std::vector<std::string> kTokenizerWords = {
    "\"type\"", "\"BPE\"", "\"Sequence\"", "\"Split\"", "\"ByteLevel\"", "\"NFC\"", "\"TemplateProcessing\"",
    "\"Regex\"", "\"String\"", "\"Isolated\"", "\"Removed\"", "\"vocab\"", "\"merges\"", "\"added_tokens\"",
    "\"id\"", "\"ids\"", "\"content\"", "\"special\"", "\"normalized\"", "\"lstrip\"", "\"rstrip\"",
    "\"single_word\"", "\"byte_fallback\"", "\"dropout\"", "\"ignore_merges\"", "\"use_regex\"",
    "\"add_prefix_space\"", "\"SpecialToken\"", "\"special_tokens\"", "\"single\"", "\"pretokenizers\"",
    "\"processors\"", "\"normalizers\"", "\"model\"", "\"<|eot|>\"", "\"(?=\"", "\"\\\\p{L}+\"", "\"(a+)+$\"",
    "\"[\"", "\"\\\\\"", "\"\\\\x{110000}\"", "2147483647", "-1", "4294967296"};
const std::vector<std::string> kConfigWords = {
    "\"bos_token\"", "\"eos_token\"", "\"pad_token\"", "\"unk_token\"", "\"add_bos_token\"", "\"add_eos_token\"",
    "\"legacy\"", "\"chat_template\"", "\"added_tokens_decoder\"", "\"content\"", "\"special\"", "\"name\"",
    "\"default\"", "\"template\"", "\"<|eot|>\"", "\"<s>\"", "\"2147483648\"", "\"-5\"", "\"1e3\"", "\" 7\"",
    "\"99999999999\""};

const std::vector<FuzzTarget> kTargets = {
    {"safetensors_file", "SafetensorsFile::open on a whole file (length, header, data)", safetensors_file_seeds,
     {"\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"__metadata__\"", "\"F32\"", "\"BF16\"", "\"U8\""},
     run_safetensors_file},
    {"safetensors_header", "SafetensorsFile::open, the JSON header (length and data section added)",
     safetensors_header_seeds,
     {"\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"__metadata__\"", "\"F32\"", "\"F64\"", "\"BF16\"", "\"I64\"",
      "\"BOOL\"", "[0,0]", "[0,64]", "[64,0]", "[]"},
     run_safetensors_header},
    {"checkpoint_index", "CheckpointFiles::open_dir with model.safetensors.index.json", checkpoint_index_seeds,
     {"\"weight_map\"", "\"metadata\"", "\"a\"", "\"b\"", std::string("\"") + kShardName + "\"", "\"../x\"", "\"/\""},
     run_checkpoint_index},
    {"model_config", "load_model_config (config.json -> ModelConfig)", model_config_seeds,
     {"\"architectures\"", "\"model_type\"", "\"vocab_size\"", "\"hidden_size\"", "\"num_attention_heads\"",
      "\"num_key_value_heads\"", "\"head_dim\"", "\"rope_scaling\"", "\"rope_parameters\"", "\"rope_type\"",
      "\"llama3\"", "\"linear\"", "\"factor\"", "\"sliding_window\"", "\"layer_types\"", "\"eos_token_id\"",
      "\"LlamaForCausalLM\"", "\"MistralForCausalLM\"", "\"Qwen3ForCausalLM\"", "\"float16\""},
     run_model_config},
    {"tokenizer_json", "load_tokenizer with tokenizer.json (byte-level BPE), then encode/decode", tokenizer_json_seeds,
     kTokenizerWords, run_tokenizer_json},
    {"tokenizer_config", "load_tokenizer with tokenizer_config.json beside a valid tokenizer.json",
     tokenizer_config_seeds, kConfigWords, run_tokenizer_config},
    {"special_tokens_map", "load_tokenizer with special_tokens_map.json beside a valid tokenizer.json",
     special_tokens_map_seeds, kConfigWords, run_special_tokens_map},
    {"sentencepiece", "load_tokenizer with tokenizer.model (sentencepiece ModelProto), then encode/decode",
     sentencepiece_seeds, {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "<0x41>", "identity"}, run_sentencepiece},
    {"dataset_jsonl", "load_dataset on a .jsonl file (every row format, strict and skip_bad_rows)",
     dataset_jsonl_seeds,
     {"\"instruction\"", "\"input\"", "\"output\"", "\"messages\"", "\"role\"", "\"content\"", "\"user\"",
      "\"assistant\"", "\"system\"", "\"conversations\"", "\"from\"", "\"value\"", "\"human\"", "\"gpt\"", "\"text\"",
      "\"input_ids\"", "\"labels\"", "-100", "\"<s>\"", "\"<|im_end|>\"", "\n"},
     run_dataset_jsonl},
    {"dataset_json", "load_dataset on a .json array", dataset_json_seeds,
     {"\"instruction\"", "\"output\"", "\"messages\"", "\"role\"", "\"content\"", "\"assistant\"", "\"conversations\"",
      "\"from\"", "\"value\"", "\"text\"", "\"input_ids\"", "\"labels\"", "-100"},
     run_dataset_json},
    {"option_file", "parse_command with --config FILE.json", option_file_seeds,
     {"\"model_name\"", "\"dataset\"", "\"r\"", "\"lora_alpha\"", "\"target_modules\"", "\"learning_rate\"",
      "\"max_steps\"", "\"packing\"", "\"all-linear\"", "\"true\"", "\"false\"", "\"1e-4\"", "\"nan\"", "\"inf\"",
      "\" 8\"", "\"0x10\"", "\"-0\""},
     run_option_file},
    {"adapter_config", "parse_json + lora_config_from_adapter_json (read_adapter_config's parts)",
     adapter_config_seeds,
     {"\"peft_type\"", "\"LORA\"", "\"r\"", "\"lora_alpha\"", "\"lora_dropout\"", "\"use_rslora\"", "\"bias\"",
      "\"target_modules\"", "\"use_dora\"", "\"fan_in_fan_out\"", "\"rank_pattern\"", "\"modules_to_save\"",
      "\"layers_to_transform\"", "\"none\""},
     run_adapter_config},
    {"parquet_rows", "for_each_parquet_row on a .parquet file (every value dumped), then for_each_dataset_row",
     parquet_rows_seeds,
     // Thrift compact field headers (i32, struct, list) and little-endian lengths beside the names.
     {"PAR1", "ARROW:schema", "instruction", "messages", "role", "content", "conversations", "from", "value",
      std::string("\x15\x00", 2), std::string("\x15\x04", 2), std::string("\x19\x1c", 2),
      std::string("\x00\x00\x00\x00", 4), std::string("\xff\xff\xff\x7f", 4)},
     run_parquet_rows},
    {"chat_template", "jinja::Template (parse + render a chat template on a conversation with tools)",
     chat_template_seeds,
     {"{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", "+%}", "{% for x in ", "{% endfor %}",
      "{% if ", "{% elif ", "{% else %}", "{% endif %}", "{% set ", "{% endset %}", "{% macro m(a, b=1) %}",
      "{% endmacro %}", "{% call m() %}", "{% endcall %}", "{% filter upper %}", "{% endfilter %}",
      "{% generation %}", "{% endgeneration %}", "{% raw %}", "{% endraw %}", "{% break %}", "{% continue %}",
      "{% with ", "namespace(", "loop.index", "loop.previtem", "messages", "message['content']", "|tojson",
      "|trim", "|length", "|map(attribute='role')", "|selectattr('role', 'eq', 'user')", " is defined",
      " is string", " is mapping", "raise_exception('x')", "range(", "~", "**", "//", "[::-1]", "caller()",
      ".split(", ".items()", "|dictsort", "|indent(", "strftime_now('%Y')", " if ", " else ", " not in ",
      "none", "true", "'", "\"", "(", ")", "[", "]"},
     run_chat_template},
    {"percent_format", "Python's % formatting in a template ('FORMAT' % (args...), % mapping, % value)",
     percent_format_seeds,
     {"%", "%*", ".*", "%(", ")s", "%-*", "%0*", "%#", "%+", "% ", "%.", "s", "d", "i", "f", "e", "g", "x", "o", "c",
      "r", "a", "%%", "2147483647", "9223372036854775807", "-9223372036854775808", "1e308", "100000", "100001",
      "-100001", "[", "]", "{", "}", ",", "\"k\"", std::string(1, '\0')},
     run_percent_format},
    {"hub_answers",
     "the hub's answers (repo info, HEAD headers, shard index) as the download reads them; no path outside the cache",
     hub_answers_seeds,
     {"\"sha\"", "\"siblings\"", "\"rfilename\"", "\"weight_map\"", "0123456789abcdef0123456789abcdef01234567",
      "X-Repo-Commit: ", "ETag: ", "X-Linked-Etag: ", "X-Linked-Size: ", "Content-Length: ", "Location: ",
      "HTTP/1.1 302 Found\r\n", "HTTP/1.1 200 OK\r\n", "\r\n", "W/\"", "https://", "http://", "file://", "/", "..",
      "../", "./", "//", "\\", "%2e%2e", "-1", "99999999999999999999", std::string(1, '\0')},
     run_hub_answers},
};

}  // namespace

const std::vector<FuzzTarget>& fuzz_targets() { return kTargets; }

}  // namespace finetune::fuzz
