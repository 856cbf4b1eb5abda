#include "finetune/gguf/gguf_vocab.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include "finetune/gguf/gguf_sentencepiece_vocab.h"
#include "finetune/tokenizer/tokenizer.h"
#include "finetune/util/errors.h"
#include "finetune/util/sha256.h"
#include "finetune/util/file_contents.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

// gguf-py TokenType.
enum TokenType : int32_t { kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5 };

// convert_hf_to_gguf.py's get_vocab_base_pre: probe text and {sha256, name} table.
const char kPreTokenizerProbe[] =
#include "gguf_pre_tokenizer_probe.inc"
    ;

const std::map<std::string, std::string>& pre_tokenizer_hashes() {
  static const std::map<std::string, std::string> table = {
#include "gguf_pre_tokenizer_hashes.inc"
  };
  return table;
}

// The Split regexes that name llama.cpp's pre-tokenizers (llama-vocab.cpp's regexes for them).
const std::vector<std::pair<std::string, std::string>>& known_pre_tokenizers() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "llama-bpe"},
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "qwen2"},
      {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "tekken"},
  };
  return names;
}

// gguf-py Keys.Tokenizer's special token id keys (spelled as llama.cpp reads them).
const std::map<std::string, std::string>& special_id_keys() {
  static const std::map<std::string, std::string> keys = {
      {"bos", "tokenizer.ggml.bos_token_id"},       {"eos", "tokenizer.ggml.eos_token_id"},
      {"eot", "tokenizer.ggml.eot_token_id"},       {"eom", "tokenizer.ggml.eom_token_id"},
      {"unk", "tokenizer.ggml.unknown_token_id"},   {"sep", "tokenizer.ggml.seperator_token_id"},
      {"pad", "tokenizer.ggml.padding_token_id"},   {"mask", "tokenizer.ggml.mask_token_id"},
  };
  return keys;
}

nlohmann::json read_json(const std::filesystem::path& path) {
  try {
    return nlohmann::json::parse(read_file(path.string()));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + ": " + e.what());
  }
}

}  // namespace

bool gguf_token_looks_special(const std::string& token) {
  auto starts = [&](const std::string& prefix) { return starts_with(token, prefix); };
  auto ends = [&](const std::string& suffix) { return ends_with(token, suffix); };
  if (token == "<pad>" || token == "<mask>" || token == "<2mass>" || token == "[@BOS@]") return true;
  if (starts("<|") && ends("|>")) return true;
  if (starts("<\xef\xbd\x9c") && ends("\xef\xbd\x9c>")) return true;  // deepseek's fullwidth bar
  return starts("<unused") && ends(">");
}

namespace {

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// tokenizer.json merges: "a b" strings as they are, [a, b] pairs joined with spaces inside a part
// written as U+0120 (gguf-py SpecialVocab, llama.cpp issue 9692).
std::vector<std::string> merges_of(const nlohmann::json& model, const std::string& source) {
  std::vector<std::string> merges;
  if (!model.contains("merges") || !model["merges"].is_array()) return merges;
  for (const auto& merge : model["merges"]) {
    if (merge.is_string()) {
      merges.push_back(merge.get<std::string>());
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      merges.push_back(replace_all(merge[0].get<std::string>(), " ", "\xc4\xa0") + " " +
                       replace_all(merge[1].get<std::string>(), " ", "\xc4\xa0"));
    } else {
      throw Error(source + ": model.merges: unknown merges format");
    }
  }
  return merges;
}

// gguf-py SpecialVocab's special token ids and add_*_token flags, in the order it sets them.
struct SpecialTokens {
  std::vector<std::string> types = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
  std::vector<std::pair<std::string, int64_t>> ids;
  std::vector<std::pair<std::string, bool>> add;
  int64_t n_vocab = -1;  // ids at or past it are skipped (SpecialVocab's n_vocab); < 0: no limit

  void set_id(const std::string& type, const nlohmann::json& id) {
    if (!id.is_number_integer()) return;
    if (id.get<int64_t>() < 0) throw Error("invalid value for special token type " + type);
    if (n_vocab >= 0 && id.get<int64_t>() >= n_vocab) return;
    for (const auto& [t, _] : ids) {
      if (t == type) return;
    }
    ids.emplace_back(type, id.get<int64_t>());
  }
  void set_add(const std::string& type, bool value) {
    for (auto& [t, v] : add) {
      if (t == type) {
        v = value;
        return;
      }
    }
    add.emplace_back(type, value);
  }
  void add_type(const std::string& type) {
    if (std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
  }
  bool has_type(const std::string& type) const { return std::find(types.begin(), types.end(), type) != types.end(); }
};

bool truthy(const nlohmann::json& value) {
  if (value.is_null()) return false;
  if (value.is_string()) return !value.get<std::string>().empty();
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_object() || value.is_array()) return !value.empty();
  return true;
}

nlohmann::json special_id(const nlohmann::json& entry) {
  const auto* id = entry.is_object() && entry.contains("SpecialToken") ? &entry["SpecialToken"] : nullptr;
  return id && id->contains("id") ? (*id)["id"] : nlohmann::json();
}

nlohmann::json sequence_id(const nlohmann::json& entry) {
  const auto* seq = entry.is_object() && entry.contains("Sequence") ? &entry["Sequence"] : nullptr;
  return seq && seq->contains("id") ? (*seq)["id"] : nlohmann::json();
}

bool in(const nlohmann::json& value, std::initializer_list<nlohmann::json> options) {
  for (const auto& option : options) {
    if (value == option) return true;
  }
  return false;
}

// SpecialVocab._try_load_from_tokenizer_json's reading of the post-processor: which special
// tokens the tokenizer adds (RobertaProcessing, or a simple TemplateProcessing).
void read_post_processor(const nlohmann::json& tokenizer, nlohmann::json& tc, SpecialTokens& special) {
  auto get = [&](const char* key) { return tc.is_object() && tc.contains(key) ? tc[key] : nlohmann::json(); };
  nlohmann::json special_bos = get("bos_token"), special_cls = get("cls_token");
  nlohmann::json special_eos = get("eos_token"), special_sep = get("sep_token");
  const bool have_tc = tc.is_object() && !tc.empty();
  if (!truthy(special_bos) && truthy(special_cls) && have_tc) tc["bos_token"] = special_bos = special_cls;
  if (!truthy(special_eos) && truthy(special_sep) && have_tc) tc["eos_token"] = special_eos = special_sep;
  if (!tokenizer.contains("post_processor") || !truthy(tokenizer["post_processor"])) return;
  const auto& post = tokenizer["post_processor"];
  const auto processors = post.contains("processors") ? post["processors"] : nlohmann::json::array({post});
  for (const auto& processor : processors) {
    const auto type = processor.value("type", std::string());
    if (type == "RobertaProcessing") {
      special.set_add("bos", true);
      special.set_add("eos", true);
      special.set_add("sep", true);
      if (!truthy(special_cls) && have_tc) {
        tc["cls_token"] = special_cls = processor.contains("cls") ? processor["cls"][0] : special_bos;
      }
      if (!truthy(special_sep) && have_tc) {
        tc["sep_token"] = special_sep = processor.contains("sep") ? processor["sep"][0] : special_eos;
      }
      continue;
    }
    if (type != "TemplateProcessing") continue;
    const auto single = processor.value("single", nlohmann::json::array());
    auto pair = processor.value("pair", nlohmann::json::array());
    nlohmann::json special_first, special_last;
    if (single.size() > 1) {
      special_first = special_id(single.front());
      if (truthy(special_first)) {
        if (!have_tc) {
          special_bos = special_first;
        } else if (!in(special_first, {special_bos, special_cls})) {
          if (!truthy(special_bos)) tc["bos_token"] = special_bos = special_first;
          if (!truthy(special_cls)) tc["cls_token"] = special_cls = special_first;
        }
        special.set_add("bos", in(special_first, {special_bos, special_cls}));
      }
      special_last = special_id(single.back());
      if (truthy(special_last)) {
        if (!have_tc) {
          special_eos = special_last;
        } else if (special_last != special_eos) {
          if (!special.has_type("eot")) {
            special.add_type("eot");
            tc["eot_token"] = special_eos;
          } else if (!special.has_type("eom")) {
            special.add_type("eom");
            tc["eom_token"] = special_eos;
          }
          tc["eos_token"] = special_eos = special_last;
        }
        special.set_add("eos", special_last == special_eos);
      }
    }
    if (pair.empty()) continue;
    const size_t start = truthy(special_first) && special_id(pair.front()) == special_first ? 1 : 0;
    const bool drop_last = truthy(special_last) && special_id(pair.back()) == special_last;
    const size_t stop = pair.size() - (drop_last ? 1 : 0);
    if (start >= stop) continue;
    pair = nlohmann::json(std::vector<nlohmann::json>(pair.begin() + start, pair.begin() + stop));
    const auto a = sequence_id(pair.front()), b = sequence_id(pair.back());
    if (a != "A" || b != "B" || pair.size() <= 2) continue;
    const auto middle = nlohmann::json(std::vector<nlohmann::json>(pair.begin() + 1, pair.end() - 1));
    bool add_sep = false;
    const auto first = special_id(middle[0]);
    if (truthy(first) && in(first, {special_sep, special_eos}) && !truthy(special_last)) add_sep = true;
    if (middle.size() == 2) {
      const auto second = special_id(middle[1]);
      if (truthy(second) && in(second, {special_sep, special_eos})) add_sep = true;
    }
    special.set_add("sep", add_sep);
    if (add_sep && !truthy(special_sep) && have_tc) tc["sep_token"] = special_eos;
  }
}

void read_normalizer(const nlohmann::json& normalizer, std::optional<bool>& lowercase,
                     std::optional<bool>& strip_accents) {
  const auto type = normalizer.value("type", std::string());
  if (type == "Lowercase") {
    lowercase = true;
  } else if (type == "StripAccents") {
    strip_accents = true;
  } else if (type == "BertNormalizer") {
    if (normalizer.contains("lowercase") && normalizer["lowercase"].is_boolean()) {
      lowercase = normalizer["lowercase"].get<bool>();
    }
    if (normalizer.contains("strip_accents") && normalizer["strip_accents"].is_boolean()) {
      strip_accents = normalizer["strip_accents"].get<bool>();
    }
  } else if (type == "Sequence" && normalizer.contains("normalizers")) {
    for (const auto& inner : normalizer["normalizers"]) read_normalizer(inner, lowercase, strip_accents);
  }
}

}  // namespace

std::string gguf_pre_tokenizer_name_from_structure(const nlohmann::json& tokenizer_json) {
  const auto pre = tokenizer_json.contains("pre_tokenizer") ? tokenizer_json["pre_tokenizer"] : nlohmann::json();
  const auto steps =
      pre.is_object() && pre.contains("pretokenizers") ? pre["pretokenizers"] : nlohmann::json::array({pre});
  auto gpt2_byte_level = [](const nlohmann::json& step) {
    return step.is_object() && step.value("type", std::string()) == "ByteLevel" && step.value("use_regex", true);
  };
  if (steps.size() == 1 && gpt2_byte_level(steps[0])) return "gpt-2";
  if (steps.size() == 2 && steps[0].is_object() && steps[0].value("type", std::string()) == "Digits" &&
      steps[0].value("individual_digits", false) && gpt2_byte_level(steps[1])) {
    return "smollm";
  }
  for (const auto& step : steps) {
    if (!step.is_object() || step.value("type", std::string()) != "Split") continue;
    const auto& pattern = step.contains("pattern") ? step["pattern"] : nlohmann::json();
    if (!pattern.is_object() || !pattern.contains("Regex")) continue;
    for (const auto& [regex, name] : known_pre_tokenizers()) {
      if (pattern["Regex"] == regex) return name;
    }
  }
  return "";
}

std::string gguf_pre_tokenizer_name(const std::string& model_dir) {
  const auto source = (std::filesystem::path(model_dir) / "tokenizer.json").string();
  const auto ids = load_tokenizer(model_dir)->encode(kPreTokenizerProbe, true);
  std::string text = "[";  // Python's str(list of ints)
  for (size_t i = 0; i < ids.size(); ++i) text += (i ? ", " : "") + std::to_string(ids[i]);
  const auto digest = sha256_hex(text + "]");
  if (const auto it = pre_tokenizer_hashes().find(digest); it != pre_tokenizer_hashes().end()) return it->second;
  const auto name = gguf_pre_tokenizer_name_from_structure(read_json(source));
  if (!name.empty()) return name;
  throw Error(source + ": pre_tokenizer: llama.cpp's converter could not name this pre-tokenizer (the sha256 " +
              digest + " of its token ids on the converter's probe text is not in its table) and it is none " +
              "of the GGUF export's known ones (a Split with Llama-3's, Qwen2's or Mistral-Nemo's regex, a GPT-2 " +
              "ByteLevel, SmolLM's Digits + ByteLevel)");
}

namespace {

// get_vocab_base's token list: the model vocabulary, then added tokens (which win), "[PAD<i>]" for holes.
void add_gpt2_tokens(GgufFileWriter& writer, const nlohmann::json& tokenizer, const std::string& source,
                     int64_t vocab_size) {
  const auto& model = tokenizer["model"];
  std::vector<std::optional<std::string>> by_id(vocab_size);
  std::map<int64_t, std::pair<bool, bool>> added;  // id -> (special, normalized)
  auto place = [&](const std::string& token, int64_t id) {
    if (id < 0 || id >= vocab_size) {
      throw Error(source + ": token '" + token + "' has id " + std::to_string(id) + ", past config.json's vocab_size " +
                  std::to_string(vocab_size));
    }
    by_id[id] = token;
  };
  for (const auto& [token, id] : model["vocab"].items()) place(token, id.get<int64_t>());
  for (const auto& token : tokenizer.value("added_tokens", nlohmann::json::array())) {
    const int64_t id = token.at("id").get<int64_t>();
    place(token.at("content").get<std::string>(), id);
    added[id] = {token.value("special", false), token.value("normalized", true)};
  }
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int64_t i = 0; i < vocab_size; ++i) {
    if (!by_id[i]) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(kUnused);
    } else if (auto it = added.find(i); it != added.end()) {
      if (it->second.first || gguf_token_looks_special(*by_id[i])) {
        tokens.push_back(*by_id[i]);
        types.push_back(kControl);
      } else {
        tokens.push_back(replace_all(*by_id[i], "\xe2\x96\x81", " "));  // user-defined "▁" -> " "
        types.push_back(kUserDefined);
      }
    } else {
      tokens.push_back(*by_id[i]);
      types.push_back(kNormal);
    }
  }
  writer.add_string_array("tokenizer.ggml.tokens", tokens);
  writer.add_int32_array("tokenizer.ggml.token_type", types);
}

// The chat template SpecialVocab exports: tokenizer_config.json's, else chat_template.jinja / .json.
nlohmann::json chat_template_of(const std::filesystem::path& dir, const nlohmann::json& tc) {
  nlohmann::json alternative;
  if (std::filesystem::exists(dir / "chat_template.jinja")) {
    alternative = read_file((dir / "chat_template.jinja").string());
  } else if (std::filesystem::exists(dir / "chat_template.json")) {
    alternative = read_json(dir / "chat_template.json").value("chat_template", nlohmann::json());
  }
  auto chat_template = tc.contains("chat_template") ? tc["chat_template"] : alternative;
  if (!chat_template.is_null() && !chat_template.is_string()) {
    throw Error((dir / "tokenizer_config.json").string() +
                ": chat_template: only a single template string is exported to GGUF");
  }
  return chat_template;
}

// tokenizer_config.json's add_<type>_token flags and <type>_token ids (looked up among
// tokenizer.json's added tokens).
void read_tokenizer_config(const nlohmann::json& tc, const nlohmann::json& added_tokens, SpecialTokens& special) {
  for (const auto& type : special.types) {
    const auto add_key = "add_" + type + "_token";
    if (tc.contains(add_key) && tc[add_key].is_boolean()) special.set_add(type, tc[add_key].get<bool>());
    const auto entry_key = type + "_token";
    if (!tc.contains(entry_key)) continue;
    const auto& entry = tc[entry_key];
    std::string content;
    if (entry.is_string()) {
      content = entry.get<std::string>();
    } else if (entry.is_object() && entry.contains("content") && entry["content"].is_string()) {
      content = entry["content"].get<std::string>();
    } else {
      continue;
    }
    for (const auto& token : added_tokens) {
      if (token.value("content", std::string()) == content) {
        special.set_id(type, token.at("id"));
        break;
      }
    }
  }
}

// gguf-py SpecialVocab(dir, load_merges, n_vocab).add_to_gguf; `tokenizer` is tokenizer.json
// (null when the directory has none); n_vocab < 0: ids are not range-checked.
void add_special_vocab(GgufFileWriter& writer, const std::filesystem::path& dir, const nlohmann::json& tokenizer,
                       const nlohmann::json& config_json, bool load_merges, int64_t n_vocab) {
  const auto source = (dir / "tokenizer.json").string();
  std::vector<std::string> merges;
  if (load_merges && tokenizer.is_object() && tokenizer.contains("model")) merges = merges_of(tokenizer["model"], source);
  SpecialTokens special;
  special.n_vocab = n_vocab;
  std::optional<bool> lowercase, strip_accents;
  if (tokenizer.is_object() && tokenizer.contains("normalizer") && truthy(tokenizer["normalizer"])) {
    read_normalizer(tokenizer["normalizer"], lowercase, strip_accents);
  }
  nlohmann::json tc = nlohmann::json::object();
  if (std::filesystem::exists(dir / "tokenizer_config.json")) tc = read_json(dir / "tokenizer_config.json");
  if (tokenizer.is_object()) read_post_processor(tokenizer, tc, special);
  nlohmann::json chat_template;
  if (!tc.empty()) {
    chat_template = chat_template_of(dir, tc);
    const auto added_tokens = tokenizer.is_object() ? tokenizer.value("added_tokens", nlohmann::json::array())
                                                    : nlohmann::json::array();
    read_tokenizer_config(tc, added_tokens, special);
  }
  for (const auto& type : special.types) {
    const auto key = type + "_token_id";
    if (config_json.contains(key)) special.set_id(type, config_json[key]);
  }

  if (!merges.empty()) writer.add_string_array("tokenizer.ggml.merges", merges);
  for (const auto& [type, id] : special.ids) {
    const auto key = special_id_keys().find(type);
    if (key == special_id_keys().end()) continue;  // cls: gguf-py has no writer for it and skips it
    writer.add_uint32(key->second, static_cast<uint32_t>(id));
  }
  for (const auto& [type, value] : special.add) {
    if (type == "bos" || type == "eos" || type == "sep") {
      writer.add_bool("tokenizer.ggml.add_" + type + "_token", value);  // gguf-py writes only these three
    }
  }
  if (chat_template.is_string()) writer.add_string("tokenizer.chat_template", chat_template.get<std::string>());
  if (lowercase) writer.add_bool("tokenizer.ggml.normalizer.lowercase", *lowercase);
  if (strip_accents) writer.add_bool("tokenizer.ggml.normalizer.strip_accents", *strip_accents);
}

// _set_vocab_sentencepiece's keys for `vocab` (or Phi3MiniModel's, which writes the same keys).
void add_sentencepiece_vocab(GgufFileWriter& writer, const std::filesystem::path& dir,
                             const nlohmann::json& config_json, const GgufSentencePieceVocab& vocab) {
  writer.add_string("tokenizer.ggml.model", "llama");
  writer.add_string("tokenizer.ggml.pre", "default");
  writer.add_string_array("tokenizer.ggml.tokens", vocab.tokens);
  writer.add_float32_array("tokenizer.ggml.scores", vocab.scores);
  writer.add_int32_array("tokenizer.ggml.token_type", vocab.types);
  const auto tokenizer_path = dir / "tokenizer.json";
  const auto tokenizer = std::filesystem::exists(tokenizer_path) ? read_json(tokenizer_path) : nlohmann::json();
  add_special_vocab(writer, dir, tokenizer, config_json, false, static_cast<int64_t>(vocab.tokens.size()));
}

// _set_vocab_gpt2.
void add_gpt2_vocab(GgufFileWriter& writer, const std::filesystem::path& dir, const nlohmann::json& config_json,
                    int64_t vocab_size) {
  const auto tokenizer_path = dir / "tokenizer.json";
  if (!std::filesystem::exists(tokenizer_path)) {
    throw Error(tokenizer_path.string() + ": not found (the GGUF export needs tokenizer.json, or a sentencepiece " +
                "tokenizer.model for a Llama/Mistral model)");
  }
  const auto source = tokenizer_path.string();
  const auto tokenizer = read_json(tokenizer_path);
  const auto& model = tokenizer.contains("model") ? tokenizer["model"] : nlohmann::json();
  if (!model.is_object() || model.value("type", std::string()) != "BPE" || !model.contains("vocab")) {
    throw Error(source + ": model.type: the GGUF export supports byte-level BPE tokenizers (or a sentencepiece " +
                "tokenizer.model for a Llama/Mistral model) only");
  }
  const auto pre = gguf_pre_tokenizer_name(dir.string());
  writer.add_string("tokenizer.ggml.model", "gpt2");
  writer.add_string("tokenizer.ggml.pre", pre);
  add_gpt2_tokens(writer, tokenizer, source, vocab_size);
  add_special_vocab(writer, dir, tokenizer, config_json, true, -1);
}

}  // namespace

namespace {

// Phi3MiniModel.set_vocab: byte-level BPE when tokenizer_config.json names GPT2Tokenizer (Phi-4),
// else its own reading of tokenizer.model.
void add_phi3_vocab(GgufFileWriter& writer, const std::filesystem::path& dir, const nlohmann::json& config_json,
                    int64_t vocab_size) {
  const auto tc_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(tc_path) && read_json(tc_path).value("tokenizer_class", std::string()) == "GPT2Tokenizer") {
    add_gpt2_vocab(writer, dir, config_json, vocab_size);
    return;
  }
  if (!std::filesystem::exists(dir / "tokenizer.model")) {
    throw Error((dir / "tokenizer.model").string() + ": not found (llama.cpp's converter reads a Phi-3 vocabulary " +
                "from tokenizer.model unless tokenizer_config.json names GPT2Tokenizer)");
  }
  const auto json_size = config_json.contains("vocab_size") && config_json["vocab_size"].is_number_integer()
                             ? std::optional<int64_t>(config_json["vocab_size"].get<int64_t>())
                             : std::nullopt;
  add_sentencepiece_vocab(writer, dir, config_json, read_gguf_phi3_vocab(dir.string(), json_size));
}

// Gemma2Model / Gemma3Model.set_vocab: tokenizer.model's pieces and no space prefix; Gemma-3
// without a tokenizer.model: byte-level BPE (Gemma-2 has no such path).
void add_gemma_vocab(GgufFileWriter& writer, const std::filesystem::path& dir, const nlohmann::json& config_json,
                     int64_t vocab_size, bool gemma2) {
  if (!std::filesystem::exists(dir / "tokenizer.model")) {
    if (gemma2) {
      throw Error((dir / "tokenizer.model").string() + ": not found (llama.cpp's converter reads a Gemma-2 " +
                  "vocabulary from tokenizer.model only)");
    }
    add_gpt2_vocab(writer, dir, config_json, vocab_size);
    return;
  }
  add_sentencepiece_vocab(writer, dir, config_json, read_gguf_sentencepiece_vocab(dir.string(), vocab_size));
  writer.add_bool("tokenizer.ggml.add_space_prefix", false);
}

}  // namespace

void add_gguf_vocab(GgufFileWriter& writer, const std::string& model_dir, const nlohmann::json& config_json,
                    int64_t vocab_size) {
  const std::filesystem::path dir(model_dir);
  const auto model_type = config_json.value("model_type", std::string());
  if (model_type == "phi3") return add_phi3_vocab(writer, dir, config_json, vocab_size);
  if (model_type == "gemma2" || model_type == "gemma3" || model_type == "gemma3_text") {
    return add_gemma_vocab(writer, dir, config_json, vocab_size, model_type == "gemma2");
  }
  const bool llama_model = model_type == "llama" || model_type == "mistral";
  if (llama_model) {  // LlamaModel.set_vocab writes add_space_prefix before the vocabulary
    const auto tc_path = dir / "tokenizer_config.json";
    const auto tc = std::filesystem::exists(tc_path) ? read_json(tc_path) : nlohmann::json::object();
    if (tc.contains("add_prefix_space") && tc["add_prefix_space"].is_boolean()) {
      writer.add_bool("tokenizer.ggml.add_space_prefix", tc["add_prefix_space"].get<bool>());
    }
  }
  if (llama_model && std::filesystem::exists(dir / "tokenizer.model")) {
    add_sentencepiece_vocab(writer, dir, config_json, read_gguf_sentencepiece_vocab(model_dir, vocab_size));
  } else {
    add_gpt2_vocab(writer, dir, config_json, vocab_size);
  }
}

std::optional<int64_t> gguf_gemma3_token_rows(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  if (std::filesystem::exists(dir / "tokenizer.model") || !std::filesystem::exists(dir / "tokenizer.json")) {
    return std::nullopt;
  }
  const auto tokenizer = read_json(dir / "tokenizer.json");
  const auto& model = tokenizer.contains("model") ? tokenizer["model"] : nlohmann::json();
  const auto vocab = model.is_object() && model.contains("vocab") ? model["vocab"].size() : 0;
  return static_cast<int64_t>(vocab + tokenizer.value("added_tokens", nlohmann::json::array()).size());
}

void check_gguf_vocabulary(const std::string& model_dir) {
  const auto config_path = std::filesystem::path(model_dir) / "config.json";
  const auto config_json = read_json(config_path);
  const auto& text = config_json.contains("text_config") && config_json["text_config"].is_object()
                         ? config_json["text_config"]
                         : config_json;  // Gemma3ForConditionalGeneration: the text tower's vocabulary
  const auto& sized = text.contains("vocab_size") ? text : config_json;
  if (!sized.contains("vocab_size") || !sized["vocab_size"].is_number_integer()) {
    throw Error(config_path.string() + ": vocab_size: missing (the GGUF export sizes the vocabulary by it)");
  }
  GgufFileWriter scratch;
  add_gguf_vocab(scratch, model_dir, config_json, sized["vocab_size"].get<int64_t>());
}

}  // namespace finetune
