// The sentencepiece token list of the GGUF export (gguf_sentencepiece_vocab.h) on the Llama-2-style
// fixture (make_tokenizer_fixtures.py's spm_llama2: 2000 pieces, byte fallback): pieces, scores
// and types as sentencepiece reports them (the values below are libsentencepiece's IdToPiece /
// GetScore), the special tokens of tokenizer_config.json's added_tokens_decoder, padding past the
// pieces and truncation to vocab_size. tests/e2e/test_gguf.py compares whole files with the converter.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "finetune/gguf/gguf_sentencepiece_vocab.h"
#include "finetune/util/errors.h"
#include "../reference/fixtures.h"
#include "../test_support.h"

namespace finetune {
namespace {

TEST(GgufSentencePieceVocab, PiecesScoresAndTypes) {
  const auto dir = reference::fixture_path("tokenizer", "spm_llama2");
  const auto vocab = read_gguf_sentencepiece_vocab(dir, 2003);
  ASSERT_EQ(vocab.tokens.size(), 2003u);
  EXPECT_EQ(vocab.tokens[0], "<unk>");
  EXPECT_EQ(vocab.types[0], 3);  // added_tokens_decoder: special -> CONTROL (sentencepiece says UNKNOWN)
  EXPECT_EQ(vocab.scores[0], -1000.0f);
  EXPECT_EQ(vocab.tokens[1], "<s>");
  EXPECT_EQ(vocab.types[1], 3);
  EXPECT_EQ(vocab.tokens[3], "<0x00>");
  EXPECT_EQ(vocab.types[3], 6);  // BYTE
  EXPECT_EQ(vocab.scores[3], 0.0f);
  EXPECT_EQ(vocab.tokens[300], "\xe2\x96\x81" "c");
  EXPECT_EQ(vocab.types[300], 1);
  EXPECT_EQ(vocab.scores[300], -41.0f);
  EXPECT_EQ(vocab.tokens[2001], "[PAD2001]");  // past the pieces
  EXPECT_EQ(vocab.types[2001], 5);
  EXPECT_EQ(vocab.scores[2001], -10000.0f);
}

TEST(GgufSentencePieceVocab, VocabSizeTruncates) {
  const auto vocab = read_gguf_sentencepiece_vocab(reference::fixture_path("tokenizer", "spm_llama2"), 100);
  EXPECT_EQ(vocab.tokens.size(), 100u);
  EXPECT_EQ(vocab.types.size(), 100u);
}

TEST(GgufSentencePieceVocab, NotAModelIsAnErrorNamingTheFile) {
  testing::TempDir dir("gguf_spm");
  dir.write("tokenizer.model", "\x0a\xff");  // a piece whose length varint never ends
  const auto message = testing::error_message([&] { read_gguf_sentencepiece_vocab(dir.str(), 10); });
  EXPECT_NE(message.find("tokenizer.model: not a sentencepiece model"), std::string::npos) << message;
}

}  // namespace
}  // namespace finetune
