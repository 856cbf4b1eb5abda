// Which pipeline transformers 5's AutoTokenizer runs for a tokenizer.json. A tokenizer class with
// its own __init__ takes only the vocabulary, merges and post-processor from tokenizer.json and
// installs its own normalizer, pre-tokenizer, decoder and model flags; TokenizersBackend /
// PreTrainedTokenizerFast run the file as written. The class is tokenizer_config.json's
// tokenizer_class, except where config.json's model_type is registered to TokenizersBackend and
// the named class differs (Mistral, Mixtral, Phi-3: their "LlamaTokenizer" is not used).
// Only the sentencepiece-style classes are rebuilt here; any other class runs the file.
#pragma once

#include <optional>
#include <string>

namespace finetune {

enum class TokenizerPipeline {
  kFile,   // tokenizer.json as written
  kLlama,  // LlamaTokenizer: Metaspace (prepend per add_prefix_space / legacy), byte fallback, no unk
  kGemma,  // GemmaTokenizer: Replace(" ", "▁"), Split(" "), byte fallback, unk_token
};

// `tokenizer_class`: tokenizer_config.json's; `model_type`: config.json's (either may be absent).
TokenizerPipeline transformers_pipeline(const std::optional<std::string>& tokenizer_class,
                                        const std::optional<std::string>& model_type);

}  // namespace finetune
