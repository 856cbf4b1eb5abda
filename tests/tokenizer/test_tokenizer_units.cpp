// Unit tests of the tokenizer module's parts: NFC against Python's unicodedata, the GPT-2 byte map,
// the Oniguruma -> PCRE2 pattern translation, tokenizer_config.json parsing, and the errors that
// name the file and the field.
#include <gtest/gtest.h>

#include "../test_support.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "finetune/tokenizer/byte_level.h"
#include "finetune/tokenizer/decode_text.h"
#include "finetune/tokenizer/regex_splitter.h"
#include "finetune/tokenizer/tokenizer.h"
#include "finetune/tokenizer/tokenizer_config.h"
#include "finetune/tokenizer/unicode_nfc.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

// A tiny valid byte-level BPE tokenizer.json; tests break one field at a time.
nlohmann::json tiny_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (const char* token : {"a", "b", "ab", "\xC4\xA0", "\xC4\xA0" "ab"}) vocab[token] = id++;
  return {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array({{{"id", 5}, {"content", "<|eot|>"}, {"special", true},
                                               {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                                               {"single_word", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", nlohmann::json::array({{{"type", "Split"}, {"pattern", {{"Regex", " ?\\p{L}+|\\s+"}}},
                                                  {"behavior", "Isolated"}, {"invert", false}},
                                                 {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                                  {"trim_offsets", true}, {"use_regex", false}}})}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array({"a b", {"\xC4\xA0", "ab"}})},
                 {"ignore_merges", false}, {"byte_fallback", false}}},
  };
}

void expect_error_mentions(const std::string& dir, const std::vector<std::string>& fragments) {
  try {
    load_tokenizer(dir);
    ADD_FAILURE() << "expected finetune::Error";
  } catch (const Error& e) {
    for (const auto& fragment : fragments) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what() << " lacks " << fragment;
    }
  }
}

TEST(TokenizerNfc, MatchesPythonUnicodedata) {
  const char* root = std::getenv("FINETUNE_FIXTURES");
  ASSERT_NE(root, nullptr) << "FINETUNE_FIXTURES is not set; run tests/reference/make_tokenizer_fixtures.py";
  std::ifstream in(std::string(root) + "/tokenizer/nfc.json");
  ASSERT_TRUE(in) << "missing $FINETUNE_FIXTURES/tokenizer/nfc.json; run make_tokenizer_fixtures.py";
  const auto cases = nlohmann::json::parse(in);
  ASSERT_GT(cases.size(), 400u);
  int failures = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const std::string got = nfc_normalize(text);
    EXPECT_EQ(got, c["nfc"].get<std::string>()) << nlohmann::json(text).dump();
    if (got != c["nfc"].get<std::string>() && ++failures > 5) break;
  }
}

TEST(TokenizerNfc, ComposesAndKeepsAscii) {
  EXPECT_EQ(nfc_normalize("Cafe\xCC\x81"), "Caf\xC3\xA9");  // e + U+0301 -> é
  EXPECT_EQ(nfc_normalize("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "\xED\x95\x9C");  // Hangul jamo -> 한
  EXPECT_EQ(nfc_normalize("plain ascii\r\n"), "plain ascii\r\n");
}

TEST(TokenizerByteLevel, MapsEveryByteAndBack) {
  const ByteLevelMap map;
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  const std::string mapped = map.encode(all_bytes);
  EXPECT_EQ(map.encode(" "), "\xC4\xA0");   // Ġ
  EXPECT_EQ(map.encode("\n"), "\xC4\x8A");  // Ċ
  EXPECT_EQ(map.encode("a"), "a");
  EXPECT_EQ(map.decode_token(mapped), all_bytes);
  EXPECT_EQ(map.decode_token("<tool call>"), "<tool call>");  // unmapped char: kept whole
}

TEST(TokenizerRegex, TranslatesWhitespaceClassesLikeOniguruma) {
  EXPECT_EQ(translate_oniguruma_pattern("\\s+(?!\\S)"), "[\\s\\x{85}]+(?![^\\s\\x{85}])");
  EXPECT_EQ(translate_oniguruma_pattern("[^\\s\\p{L}]"), "[^\\s\\x{85}\\p{L}]");
  const RegexSplitter splitter("\\s+|\\S+", false);
  const auto pieces = splitter.split_isolated("a\xC2\x85" "b");  // NEL is whitespace for Oniguruma
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[1], "\xC2\x85");
  EXPECT_THROW(RegexSplitter("(unclosed", false), Error);
}

TEST(TokenizerDecodeText, LossyUtf8AndCleanup) {
  EXPECT_EQ(utf8_lossy("ok\xFF" "x"), "ok\xEF\xBF\xBDx");
  EXPECT_EQ(utf8_lossy("\xE2\x82"), "\xEF\xBF\xBD");  // truncated sequence: one replacement
  EXPECT_EQ(clean_up_tokenization("a , b . I 'm"), "a, b. I'm");
}

TEST(TokenizerTiny, EncodesMergesAddedTokensAndPostProcessor) {
  TempDir dir("tiny");
  dir.write("tokenizer.json", tiny_tokenizer_json().dump());
  dir.write("tokenizer_config.json", R"({"eos_token": "<|eot|>", "bos_token": {"content": "ab"},
                                        "add_bos_token": true, "chat_template": [{"name": "default", "template": "T"}]})");
  const auto tok = load_tokenizer(dir.str());
  EXPECT_EQ(tok->encode("ab ab<|eot|>", false), (std::vector<int32_t>{2, 4, 5}));
  // With a tokenizer.json, transformers 5 ignores add_bos_token: post_processor null adds nothing.
  EXPECT_EQ(tok->encode("ab", true), (std::vector<int32_t>{2}));
  EXPECT_EQ(tok->decode({2, 4, 5}, false), "ab ab<|eot|>");
  EXPECT_EQ(tok->decode({2, 4, 5}, true), "ab ab");
  EXPECT_EQ(tok->special_tokens().eos_token_id.value_or(-1), 5);
  EXPECT_EQ(tok->special_tokens().bos_token_id.value_or(-1), 2);
  EXPECT_FALSE(tok->special_tokens().pad_token.has_value());
  EXPECT_FALSE(tok->special_tokens().pad_token_id.has_value());
  EXPECT_EQ(tok->special_tokens().chat_templates, (ChatTemplates{{"default", "T"}}));
  EXPECT_EQ(tok->vocab_size(), 6);
  EXPECT_THROW(tok->decode({99}, false), Error);
}

TEST(TokenizerTiny, SpecialTokensMapFillsMissingEntries) {
  TempDir dir("stmap");
  dir.write("tokenizer.json", tiny_tokenizer_json().dump());
  dir.write("special_tokens_map.json", R"({"pad_token": {"content": "<|eot|>", "lstrip": false}})");
  const auto tok = load_tokenizer(dir.str());
  EXPECT_EQ(tok->special_tokens().pad_token_id.value_or(-1), 5);
  EXPECT_FALSE(tok->special_tokens().bos_token.has_value());
}

TEST(TokenizerErrors, MissingDirectoryAndFiles) {
  expect_error_mentions("/nonexistent/finetune/model", {"/nonexistent/finetune/model"});
  TempDir dir("empty");
  expect_error_mentions(dir.str(), {"tokenizer.json", "tokenizer.model"});
}

// A model directory the file system cannot look into (issue 30): a name too long (ENAMETOOLONG), or
// a directory so deep that tokenizer.json fits in PATH_MAX but tokenizer_config.json does not. An
// Error naming the path, as main reports every other; not a bare std::filesystem_error. (A
// directory without search permission cannot be tested as root, which ignores permissions.)
TEST(TokenizerErrors, PathsTheFileSystemRefusesAreNamed) {
  TempDir dir("too_long");
  const std::string too_long = dir.str() + "/" + std::string(300, 'a');
  expect_error_mentions(too_long, {too_long, "File name too long"});
  const std::string file = dir.file("a_file");
  dir.write("a_file", "x");
  expect_error_mentions(file, {file, "tokenizer directory does not exist"});  // ENOTDIR is "not there"
  // 4080 bytes: DIR/tokenizer.json (4095) fits in PATH_MAX (4096 with its NUL), DIR/tokenizer_config.json not.
  std::string deep = dir.str();
  while (deep.size() + 201 <= 4080) deep += "/" + std::string(200, 'd');
  if (deep.size() + 2 <= 4080) deep += "/" + std::string(4080 - deep.size() - 1, 'e');
  fs::create_directories(deep);
  std::ofstream(deep + "/tokenizer.json") << tiny_tokenizer_json().dump();
  ASSERT_TRUE(fs::is_regular_file(deep + "/tokenizer.json"));
  expect_error_mentions(deep, {deep + "/tokenizer_config.json: cannot look at the tokenizer config",
                               "File name too long"});
}

TEST(TokenizerErrors, MalformedJsonNamesTheFile) {
  TempDir dir("malformed");
  dir.write("tokenizer.json", "{\"model\": [1, 2");
  expect_error_mentions(dir.str(), {"tokenizer.json", "invalid JSON at line 1"});
  TempDir config_dir("malformed_config");
  config_dir.write("tokenizer.json", tiny_tokenizer_json().dump());
  config_dir.write("tokenizer_config.json", "{not json");
  expect_error_mentions(config_dir.str(), {"tokenizer_config.json", "invalid JSON at line 1"});
}

// ~120 KB of nesting in any of the three JSON files, as the whole file or below a key: an error
// naming the file.
TEST(TokenizerErrors, DeeplyNestedJsonNamesTheFile) {
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    for (const char bracket : {'[', '{'}) {
      for (const std::string& text :
           {testing::nested_json(bracket), "{\"unused\": " + testing::nested_json(bracket) + "}"}) {
        TempDir dir("deep");
        dir.write("tokenizer.json", tiny_tokenizer_json().dump());
        dir.write(file, text);
        expect_error_mentions(dir.str(), {dir.file(file) + ": invalid JSON at line 1", "nests deeper than 128 levels"});
      }
    }
  }
}

TEST(TokenizerErrors, UnsupportedModelTypes) {
  for (const char* type : {"WordPiece", "Unigram"}) {
    TempDir dir(std::string("model_") + type);
    auto json = tiny_tokenizer_json();
    json["model"]["type"] = type;
    dir.write("tokenizer.json", json.dump());
    expect_error_mentions(dir.str(), {"tokenizer.json", "model.type", type});
  }
}

TEST(TokenizerErrors, UnsupportedPipelineStagesNameTheField) {
  {
    TempDir dir("whitespace");
    auto json = tiny_tokenizer_json();
    json["pre_tokenizer"]["pretokenizers"][1] = {{"type", "Whitespace"}};
    dir.write("tokenizer.json", json.dump());
    expect_error_mentions(dir.str(), {"tokenizer.json", "pre_tokenizer.pretokenizers[1].type", "Whitespace"});
  }
  {
    TempDir dir("nfkc");
    auto json = tiny_tokenizer_json();
    json["normalizer"] = {{"type", "NFKC"}};
    dir.write("tokenizer.json", json.dump());
    expect_error_mentions(dir.str(), {"tokenizer.json", "normalizer.type", "NFKC"});
  }
  {
    TempDir dir("behavior");
    auto json = tiny_tokenizer_json();
    json["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Contiguous";
    dir.write("tokenizer.json", json.dump());
    expect_error_mentions(dir.str(), {"pre_tokenizer.pretokenizers[0].behavior"});
  }
  {
    TempDir dir("bad_merge");
    auto json = tiny_tokenizer_json();
    json["model"]["merges"].push_back("b zz");
    dir.write("tokenizer.json", json.dump());
    expect_error_mentions(dir.str(), {"tokenizer.json", "model.merges[2]"});
  }
  {
    TempDir dir("roberta");
    auto json = tiny_tokenizer_json();
    json["post_processor"] = {{"type", "RobertaProcessing"}};
    dir.write("tokenizer.json", json.dump());
    expect_error_mentions(dir.str(), {"post_processor.type", "RobertaProcessing"});
  }
}

TEST(TokenizerErrors, ConfigFieldsAreValidated) {
  TempDir dir("bad_config");
  dir.write("tokenizer.json", tiny_tokenizer_json().dump());
  dir.write("tokenizer_config.json", R"({"add_bos_token": "yes"})");
  expect_error_mentions(dir.str(), {"tokenizer_config.json", "add_bos_token"});
  dir.write("tokenizer_config.json", R"({"eos_token": 7})");
  expect_error_mentions(dir.str(), {"tokenizer_config.json", "eos_token"});
  dir.write("tokenizer_config.json", R"({"pad_token": "<not-in-vocab>"})");
  expect_error_mentions(dir.str(), {"pad_token", "<not-in-vocab>"});
}

// Split with {"String": ...} compiles its pattern as a PCRE2 literal (it used to fail to compile:
// PCRE2_LITERAL refuses PCRE2_UCP).
TEST(TokenizerTiny, SplitOnALiteralString) {
  TempDir dir("literal_split");
  auto json = tiny_tokenizer_json();
  json["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", "a"}};
  dir.write("tokenizer.json", json.dump());
  const auto tok = load_tokenizer(dir.str());
  EXPECT_EQ(tok->encode("aab", false), (std::vector<int32_t>{0, 0, 1}));  // "a" | "a" | "b": no "ab" merge
  json["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", "(["}};  // regex syntax, taken literally
  dir.write("tokenizer.json", json.dump());
  EXPECT_EQ(load_tokenizer(dir.str())->encode("ab", false), (std::vector<int32_t>{2}));
}

// Digits (SmolLM's first pre-tokenizer step): individual_digits cuts every digit into its own
// word, so "12" cannot merge; without it a run of digits stays one word and merges.
TEST(TokenizerTiny, DigitsPreTokenizer) {
  TempDir dir("digits");
  auto json = tiny_tokenizer_json();
  json["model"]["vocab"]["1"] = 6;
  json["model"]["vocab"]["2"] = 7;
  json["model"]["vocab"]["12"] = 8;
  json["model"]["merges"].push_back("1 2");
  json["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Digits"}, {"individual_digits", true}};
  dir.write("tokenizer.json", json.dump());
  EXPECT_EQ(load_tokenizer(dir.str())->encode("ab12", false), (std::vector<int32_t>{2, 6, 7}));
  json["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = false;
  dir.write("tokenizer.json", json.dump());
  EXPECT_EQ(load_tokenizer(dir.str())->encode("ab12", false), (std::vector<int32_t>{2, 8}));
}

// Ids anywhere in int32's range are fine (the vocabulary is a map, not a vector sized by the
// largest id); ids outside it, or not integers, are errors naming the field.
TEST(TokenizerErrors, TokenIdsAreCheckedIntegers) {
  TempDir dir("ids");
  auto json = tiny_tokenizer_json();
  json["model"]["vocab"]["b"] = 2147483647;
  dir.write("tokenizer.json", json.dump());
  const auto tok = load_tokenizer(dir.str());
  EXPECT_EQ(tok->token_to_id("b").value_or(-1), 2147483647);
  EXPECT_EQ(tok->decode({2147483647}, false), "b");
  for (const nlohmann::json& bad : {nlohmann::json(2147483648LL), nlohmann::json(-1), nlohmann::json(1.5),
                                    nlohmann::json("1"), nlohmann::json(18446744073709551615ULL)}) {
    json = tiny_tokenizer_json();
    json["model"]["vocab"]["b"] = bad;
    dir.write("tokenizer.json", json.dump());
    expect_error_mentions(dir.str(), {"tokenizer.json", "model.vocab.b", "token id"});
    json = tiny_tokenizer_json();
    json["added_tokens"][0]["id"] = bad;
    dir.write("tokenizer.json", json.dump());
    expect_error_mentions(dir.str(), {"tokenizer.json", "added_tokens[0]", "token id"});
  }
  dir.write("tokenizer.json", tiny_tokenizer_json().dump());
  for (const char* key : {"-5", "abc", "2147483648", "", " 5", "5x"}) {
    dir.write("tokenizer_config.json", nlohmann::json({{"added_tokens_decoder", {{key, {{"content", "<x>"}}}}}}).dump());
    expect_error_mentions(dir.str(), {"tokenizer_config.json", "added_tokens_decoder", "not a token id"});
  }
}

// Fields of the wrong JSON type are errors naming the field, not nlohmann's type_error.
TEST(TokenizerErrors, MistypedFieldsNameTheField) {
  const nlohmann::json special_token_piece = {{"SpecialToken", {{"id", "<|eot|>"}, {"type_id", 0}}}};
  const std::vector<std::pair<nlohmann::json::json_pointer, nlohmann::json>> edits = {
      {nlohmann::json::json_pointer("/model/byte_fallback"), "no"},
      {nlohmann::json::json_pointer("/model/ignore_merges"), 1},
      {nlohmann::json::json_pointer("/model/dropout"), "0.1"},
      {nlohmann::json::json_pointer("/model/type"), 5},
      {nlohmann::json::json_pointer("/pre_tokenizer/pretokenizers/0/invert"), "false"},
      {nlohmann::json::json_pointer("/pre_tokenizer/pretokenizers/0/behavior"), 3},
      {nlohmann::json::json_pointer("/pre_tokenizer/pretokenizers/1/add_prefix_space"), "x"},
      {nlohmann::json::json_pointer("/pre_tokenizer/pretokenizers/1/use_regex"), nlohmann::json::array()},
      {nlohmann::json::json_pointer("/post_processor"),
       {{"type", "TemplateProcessing"}, {"single", {{{"SpecialToken", "<|eot|>"}}}}}},
      {nlohmann::json::json_pointer("/post_processor"),
       {{"type", "TemplateProcessing"}, {"single", {special_token_piece}},
        {"special_tokens", {{"<|eot|>", {{"ids", 5}}}}}}},
      {nlohmann::json::json_pointer("/post_processor"),
       {{"type", "TemplateProcessing"}, {"single", {special_token_piece}},
        {"special_tokens", {{"<|eot|>", {{"ids", {"5"}}}}}}}},
      {nlohmann::json::json_pointer("/post_processor"), {{"type", "TemplateProcessing"}, {"single", {7}}}},
  };
  for (const auto& [pointer, value] : edits) {
    TempDir dir("mistyped");
    auto json = tiny_tokenizer_json();
    json[pointer] = value;
    dir.write("tokenizer.json", json.dump());
    const std::string field = pointer.to_string().substr(1);
    SCOPED_TRACE(field);
    expect_error_mentions(dir.str(), {dir.file("tokenizer.json") + ": field '"});
  }
  TempDir dir("mistyped_config");
  dir.write("tokenizer.json", tiny_tokenizer_json().dump());
  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": 5, "template": "x"}]})");
  expect_error_mentions(dir.str(), {"tokenizer_config.json", "chat_template"});
}

TEST(TokenizerErrors, CorruptSentencePieceModel) {
  TempDir dir("bad_spm");
  dir.write("tokenizer.model", std::string("\x0a\xff\xff\xff\x0f garbage", 14));
  expect_error_mentions(dir.str(), {"tokenizer.model"});
}

}  // namespace
}  // namespace finetune
