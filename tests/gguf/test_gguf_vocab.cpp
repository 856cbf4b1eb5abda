// Which vocabularies the GGUF export names and refuses (gguf_vocab.h): the pre-tokenizer fallback
// by structure, and check_gguf_vocabulary on a model directory built from the tokenizer fixtures.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "finetune/gguf/gguf_vocab.h"
#include "finetune/util/errors.h"
#include "../reference/fixtures.h"
#include "../test_support.h"

namespace finetune {
namespace {

nlohmann::json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

nlohmann::json sequence(const std::vector<nlohmann::json>& steps) {
  nlohmann::json out = {{"type", "Sequence"}};
  out["pretokenizers"] = steps;
  return out;
}

TEST(GgufVocab, PreTokenizerByStructure) {
  EXPECT_EQ(gguf_pre_tokenizer_name_from_structure({{"pre_tokenizer", byte_level(true)}}), "gpt-2");
  EXPECT_EQ(gguf_pre_tokenizer_name_from_structure(
                {{"pre_tokenizer", sequence({nlohmann::json{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)})}}),
            "smollm");
  EXPECT_EQ(gguf_pre_tokenizer_name_from_structure({{"pre_tokenizer", byte_level(false)}}), "");
  EXPECT_EQ(gguf_pre_tokenizer_name_from_structure(
                {{"pre_tokenizer", sequence({nlohmann::json{{"type", "Split"}, {"pattern", {{"Regex", "\\s+|\\S+"}}}}, byte_level(false)})}}),
            "");
}

TEST(GgufVocab, KnownRegexesFromTheFixtures) {
  for (const auto& [fixture, name] : {std::pair<std::string, std::string>{"llama3", "llama-bpe"}, {"qwen2", "qwen2"}}) {
    std::ifstream in(reference::fixture_path("tokenizer", fixture + "/tokenizer.json"));
    EXPECT_EQ(gguf_pre_tokenizer_name_from_structure(nlohmann::json::parse(in)), name) << fixture;
  }
}

class CheckGgufVocabulary : public ::testing::Test {
 protected:
  void write_config(const std::string& model_type, int vocab_size) {
    std::ofstream(dir_ / "config.json") << nlohmann::json{{"model_type", model_type}, {"vocab_size", vocab_size}};
  }
  void copy_fixture(const std::string& fixture, const std::string& file) {
    std::filesystem::copy_file(reference::fixture_path("tokenizer", fixture + "/" + file), dir_ / file,
                               std::filesystem::copy_options::overwrite_existing);
  }
  std::string error() {
    try {
      check_gguf_vocabulary(dir_.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  testing::TempDir temp_{"gguf_vocab"};
  std::filesystem::path dir_ = temp_.path();
};

TEST_F(CheckGgufVocabulary, AcceptsByteLevelAndSentencePiece) {
  write_config("qwen2", 1434);
  copy_fixture("qwen2", "tokenizer.json");
  copy_fixture("qwen2", "tokenizer_config.json");
  EXPECT_EQ(error(), "");
  std::filesystem::remove(dir_ / "tokenizer.json");
  write_config("llama", 2000);
  copy_fixture("spm_llama2", "tokenizer.model");
  copy_fixture("spm_llama2", "tokenizer_config.json");
  EXPECT_EQ(error(), "");
}

TEST_F(CheckGgufVocabulary, RefusesWithTheReason) {
  write_config("qwen2", 1434);
  copy_fixture("qwen2", "tokenizer_config.json");
  std::ifstream in(reference::fixture_path("tokenizer", "qwen2/tokenizer.json"));
  auto tokenizer = nlohmann::json::parse(in);
  tokenizer["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+|\\S+";
  std::ofstream(dir_ / "tokenizer.json") << tokenizer;
  EXPECT_NE(error().find("tokenizer.json: pre_tokenizer: llama.cpp's converter could not name"), std::string::npos)
      << error();
  std::filesystem::remove(dir_ / "tokenizer.json");
  EXPECT_NE(error().find("tokenizer.json: not found"), std::string::npos) << error();  // qwen2: no sentencepiece
  std::filesystem::remove(dir_ / "config.json");
  EXPECT_NE(error().find("config.json"), std::string::npos) << error();
}

}  // namespace
}  // namespace finetune
