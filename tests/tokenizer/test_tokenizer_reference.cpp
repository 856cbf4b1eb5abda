// Tokenizers against transformers: ids with and without special tokens, decode, and round trips
// for every line of a multilingual corpus. Fixtures: tests/reference/make_tokenizer_fixtures.py.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "finetune/tokenizer/bpe_tokenizer.h"
#include "finetune/tokenizer/sentencepiece_tokenizer.h"
#include "finetune/tokenizer/tokenizer.h"
#include "finetune/tokenizer/tokenizer_config.h"

namespace finetune {
namespace {

std::string fixture_dir(const std::string& name) {
  const char* root = std::getenv("FINETUNE_FIXTURES");
  if (!root) {
    ADD_FAILURE() << "FINETUNE_FIXTURES is not set; run tests/reference/make_tokenizer_fixtures.py "
                     "$FINETUNE_FIXTURES/tokenizer first (scripts/test.sh does)";
    return "";
  }
  const std::string dir = std::string(root) + "/tokenizer/" + name;
  if (!std::filesystem::exists(dir + "/expected.json")) {
    ADD_FAILURE() << dir << "/expected.json is missing; run tests/reference/make_tokenizer_fixtures.py";
    return "";
  }
  return dir;
}

nlohmann::json read_expected(const std::string& dir) {
  std::ifstream in(dir + "/expected.json");
  return nlohmann::json::parse(in);
}

std::string printable(const std::string& text) { return nlohmann::json(text).dump(); }

void check_against_reference(const std::string& name) {
  const std::string dir = fixture_dir(name);
  if (dir.empty()) return;
  const nlohmann::json expected = read_expected(dir);
  const auto tokenizer = load_tokenizer(dir);

  const auto& special = expected["special"];
  EXPECT_EQ(tokenizer->vocab_size(), special["vocab_size"].get<int64_t>());
  for (const char* key : {"bos", "eos", "pad"}) {
    const auto& token = special[std::string(key) + "_token"];
    const auto& id = special[std::string(key) + "_token_id"];
    const SpecialTokens& mine = tokenizer->special_tokens();
    const auto& my_token = key == std::string("bos") ? mine.bos_token : key == std::string("eos") ? mine.eos_token : mine.pad_token;
    const auto& my_id = key == std::string("bos") ? mine.bos_token_id : key == std::string("eos") ? mine.eos_token_id : mine.pad_token_id;
    if (token.is_null()) {
      EXPECT_FALSE(my_token.has_value()) << key;
      EXPECT_FALSE(my_id.has_value()) << key;
    } else {
      EXPECT_EQ(my_token.value_or("<none>"), token.get<std::string>()) << key;
      EXPECT_EQ(my_id.value_or(-1), id.get<int32_t>()) << key;
    }
  }

  size_t failures = 0, round_trips = 0;
  for (const auto& c : expected["cases"]) {
    if (failures > 10) break;  // keep the report readable
    const std::string text = c["text"].get<std::string>();
    const auto with_special = c["ids_with_special"].get<std::vector<int32_t>>();
    const auto without_special = c["ids_without_special"].get<std::vector<int32_t>>();
    const auto ids = tokenizer->encode(text, true);
    const auto plain_ids = tokenizer->encode(text, false);
    const bool ok = ids == with_special && plain_ids == without_special;
    EXPECT_EQ(ids, with_special) << "add_special_tokens=true, text " << printable(text);
    EXPECT_EQ(plain_ids, without_special) << "add_special_tokens=false, text " << printable(text);
    const std::string decoded = tokenizer->decode(with_special, false);
    const std::string decoded_skip = tokenizer->decode(with_special, true);
    EXPECT_EQ(decoded, c["decoded"].get<std::string>()) << "decode, text " << printable(text);
    EXPECT_EQ(decoded_skip, c["decoded_skip_special"].get<std::string>()) << "decode(skip), text " << printable(text);
    // decode(encode(x)) == x wherever transformers itself round-trips; NFC, lstrip/rstrip added
    // tokens and the Metaspace "first" scheme legitimately change some inputs, and there the
    // result must be transformers' decode.
    const std::string decoded_plain = c["decoded_plain"].get<std::string>();
    EXPECT_EQ(tokenizer->decode(plain_ids, false), decoded_plain) << "decode(encode(x)), text " << printable(text);
    if (decoded_plain == text) {
      EXPECT_EQ(tokenizer->decode(plain_ids, false), text) << "round trip, text " << printable(text);
      ++round_trips;
    }
    if (!ok || decoded != c["decoded"].get<std::string>()) ++failures;
  }
  EXPECT_GE(expected["cases"].size(), 40u);
  EXPECT_GT(round_trips, expected["cases"].size() * 3 / 4) << "too few lines round-trip";
  if (name == "llama3") {  // byte-level BPE without a normalizer is lossless except around <mask>
    EXPECT_GE(round_trips + 8, expected["cases"].size());
  }
}

TEST(TokenizerReference, Llama3ByteLevelBpeMatchesTransformers) { check_against_reference("llama3"); }

TEST(TokenizerReference, AddEosTokenInConfigIsIgnoredWithTokenizerJsonLikeTransformers) {
  check_against_reference("llama3_add_eos");
}

TEST(TokenizerReference, Qwen2ByteLevelBpeWithNfcMatchesTransformers) { check_against_reference("qwen2"); }

TEST(TokenizerReference, SentencePieceLlama2MatchesTransformers) { check_against_reference("spm_llama2"); }

TEST(TokenizerReference, SentencePieceStyleTokenizerJsonMatchesTransformers) {
  check_against_reference("spm_llama2_json");  // LlamaTokenizer's pipeline over the file's vocabulary
}

TEST(TokenizerReference, Phi3LegacyPrependReplaceLayoutMatchesTransformers) { check_against_reference("phi3_legacy"); }

TEST(TokenizerReference, MistralMetaspaceSplitLayoutMatchesTransformers) { check_against_reference("mistral_metaspace"); }

TEST(TokenizerReference, GemmaVocabularyAndSpecialTokensMatchTransformers) { check_against_reference("gemma"); }

// Llama-2 / TinyLlama ship tokenizer.json and tokenizer.model: load_tokenizer reads the JSON (as
// AutoTokenizer does), and the sentencepiece implementation gives the same ids and text from the
// model file.
TEST(TokenizerReference, TokenizerJsonAndTokenizerModelGiveTheSameIds) {
  const std::string dir = fixture_dir("spm_llama2_json");
  if (dir.empty()) return;
  const auto from_json = load_tokenizer(dir);
  ASSERT_NE(dynamic_cast<const BpeTokenizer*>(from_json.get()), nullptr);
  const SentencePieceTokenizer from_model(dir + "/tokenizer.model", read_tokenizer_config(dir));
  size_t compared = 0;
  const nlohmann::json expected = read_expected(dir);
  for (const auto& c : expected["cases"]) {
    const std::string text = c["text"].get<std::string>();
    for (const bool special : {true, false}) {
      const auto ids = from_json->encode(text, special);
      EXPECT_EQ(from_model.encode(text, special), ids) << printable(text);
      EXPECT_EQ(from_model.decode(ids, false), from_json->decode(ids, false)) << printable(text);
      ++compared;
    }
  }
  EXPECT_EQ(from_model.vocab_size(), from_json->vocab_size());
  EXPECT_GE(compared, 400u);
}

TEST(TokenizerReference, Llama3SpecialTokensAndTemplate) {
  const std::string dir = fixture_dir("llama3");
  if (dir.empty()) return;
  const auto tokenizer = load_tokenizer(dir);
  const auto bos = tokenizer->token_to_id("<|begin_of_text|>");
  const auto eot = tokenizer->token_to_id("<|eot_id|>");
  ASSERT_TRUE(bos && eot);
  const auto ids = tokenizer->encode("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), *bos);
  EXPECT_EQ(ids[1], *tokenizer->token_to_id("<|start_header_id|>"));
  EXPECT_EQ(ids.back(), *eot);
  EXPECT_NE(tokenizer->special_tokens().chat_templates.at("default").find("start_header_id"), std::string::npos);
  EXPECT_FALSE(tokenizer->token_to_id("definitely-not-a-token-\xF0\x9F\x98\x80").has_value());
}

TEST(TokenizerReference, QwenHasNoBosAndKeepsPadFromObjectForm) {
  const std::string dir = fixture_dir("qwen2");
  if (dir.empty()) return;
  const auto tokenizer = load_tokenizer(dir);
  EXPECT_EQ(tokenizer->encode("hello", true), tokenizer->encode("hello", false));
  EXPECT_EQ(tokenizer->special_tokens().pad_token.value_or(""), "<|endoftext|>");
  EXPECT_EQ(tokenizer->encode("<|im_start|>", false), std::vector<int32_t>{*tokenizer->token_to_id("<|im_start|>")});
}

}  // namespace
}  // namespace finetune
