// tokenizer.json's pre-tokenizer (tokenizers' pre_tokenizers): cuts normalized text into the words
// the BPE model encodes one by one.
//   Split(pattern, behavior)   Regex or String; Isolated, Removed, MergedWithPrevious, MergedWithNext
//   ByteLevel                  GPT-2's regex (use_regex) and the byte -> character map
//   Metaspace(replacement, prepend_scheme, split)
//                              " " -> "▁", then "▁" prepended unless the word starts with it:
//                              "always" to every word, "first" only to a word at offset 0 of the
//                              input text (not after an added token), "never"; split=true cuts
//                              before every "▁"
//   Digits(individual_digits)  every \p{N} character its own word, or each run of them (SmolLM)
//   Sequence                   the above in order
// Anything else is refused with an Error naming the file and the field.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "finetune/tokenizer/byte_level.h"
#include "finetune/tokenizer/regex_splitter.h"

namespace finetune {

enum class PrependScheme { kFirst, kAlways, kNever };

class PreTokenizer {
 public:
  // No pre-tokenizer: the whole text is one word.
  PreTokenizer() = default;
  // `node`: the "pre_tokenizer" object of tokenizer.json; `where` its field path for errors.
  static PreTokenizer from_json(const nlohmann::json& node, const std::string& path, const std::string& where);
  // What transformers' LlamaTokenizer installs: Metaspace("▁", scheme, split=false).
  static PreTokenizer metaspace(PrependScheme scheme);
  // What GemmaTokenizer installs: Split(" ", MergedWithPrevious).
  static PreTokenizer gemma();

  // `at_text_start`: `text` begins at offset 0 of the caller's input (Metaspace "first").
  std::vector<std::string> split(const std::string& text, bool at_text_start) const;

 private:
  struct Step {
    enum class Kind { kSplitIsolated, kSplitRemoved, kSplitMergedWithPrevious, kSplitMergedWithNext, kByteLevel, kMetaspace };
    Kind kind = Kind::kSplitIsolated;
    std::shared_ptr<RegexSplitter> regex;  // Split; ByteLevel(use_regex=true)
    bool add_prefix_space = false;         // ByteLevel
    std::string replacement;               // Metaspace
    PrependScheme scheme = PrependScheme::kAlways;
    bool split = true;
  };
  struct Word {
    std::string text;
    bool at_text_start;
  };
  void append_from_json(const nlohmann::json& node, const std::string& path, const std::string& where);
  void append_split(const nlohmann::json& node, const std::string& path, const std::string& where);
  void append_metaspace(const nlohmann::json& node, const std::string& path, const std::string& where);
  void apply(const Step& step, const Word& word, std::vector<Word>& out) const;

  std::vector<Step> steps_;
  std::shared_ptr<const ByteLevelMap> byte_level_;
};

}  // namespace finetune
