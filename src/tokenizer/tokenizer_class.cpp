#include "finetune/tokenizer/tokenizer_class.h"

#include <map>

namespace finetune {
namespace {

std::string without_fast_suffix(const std::string& name) {
  const std::string suffix = "Fast";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return name.substr(0, name.size() - suffix.size());
  }
  return name;
}

// transformers' TOKENIZER_MAPPING_NAMES for the model types whose tokenizers this module rebuilds
// or must not rebuild (llama has no entry: its tokenizer_class decides).
std::optional<std::string> registered_class(const std::string& model_type) {
  static const std::map<std::string, std::string> kRegistered = {
      {"mistral", "TokenizersBackend"}, {"mixtral", "TokenizersBackend"},   {"phi3", "TokenizersBackend"},
      {"phimoe", "TokenizersBackend"},  {"gemma", "GemmaTokenizer"},        {"gemma2", "GemmaTokenizer"},
      {"gemma3", "GemmaTokenizer"},     {"gemma3_text", "GemmaTokenizer"},
  };
  const auto it = kRegistered.find(model_type);
  if (it == kRegistered.end()) return std::nullopt;
  return it->second;
}

}  // namespace

TokenizerPipeline transformers_pipeline(const std::optional<std::string>& tokenizer_class,
                                        const std::optional<std::string>& model_type) {
  const std::optional<std::string> registered = model_type ? registered_class(*model_type) : std::nullopt;
  std::optional<std::string> name = tokenizer_class ? std::optional<std::string>(without_fast_suffix(*tokenizer_class)) : registered;
  if (tokenizer_class && registered && *name != *registered && *registered == "TokenizersBackend") return TokenizerPipeline::kFile;
  if (name == "LlamaTokenizer") return TokenizerPipeline::kLlama;
  if (name == "GemmaTokenizer") return TokenizerPipeline::kGemma;
  return TokenizerPipeline::kFile;
}

}  // namespace finetune
