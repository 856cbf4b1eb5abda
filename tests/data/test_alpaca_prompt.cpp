// The alpaca prompt against unsloth-cli.py's own template text: the fixture formats rows with the
// literal copied from unsloth-cli.py and its formatting_prompts_func (prompt.format(instruction,
// input, output) + EOS; tests/reference/make_data_fixtures.py), and alpaca_prompt + output + EOS
// must be that text byte for byte (the token ids then are tokenizer(text)'s: test_chat_tokenization.cpp).
#include <gtest/gtest.h>

#include <string>

#include "../reference/fixtures.h"
#include "finetune/data/dataset_formats.h"

namespace finetune {
namespace {

TEST(AlpacaPrompt, EqualsUnslothClisFormattedTemplate) {
  const auto fixture = reference::load_json_fixture("data", "alpaca.json");
  const std::string eos = fixture.at("eos");
  ASSERT_GE(fixture.at("cases").size(), 3u);
  for (const auto& c : fixture.at("cases")) {
    const std::string text = alpaca_prompt(c.at("instruction"), c.at("input")) + c.at("output").get<std::string>() + eos;
    EXPECT_EQ(text, c.at("expected").get<std::string>());
  }
  // The indentation of the script's literal is part of the text.
  EXPECT_NE(alpaca_prompt("i", "").find("\n\n    ### Response:\n    "), std::string::npos);
}

}  // namespace
}  // namespace finetune
