// load_tokenizer(): picks the implementation for a model directory.
#include <filesystem>

#include "finetune/tokenizer/bpe_tokenizer.h"
#include "finetune/tokenizer/json_file.h"
#include "finetune/tokenizer/sentencepiece_tokenizer.h"
#include "finetune/tokenizer/tokenizer.h"
#include "finetune/tokenizer/tokenizer_config.h"
#include "finetune/util/errors.h"

namespace finetune {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(model_dir)) throw Error(model_dir + ": tokenizer directory does not exist");
  const std::string json_path = (fs::path(model_dir) / "tokenizer.json").string();
  const std::string spm_path = (fs::path(model_dir) / "tokenizer.model").string();
  const TokenizerConfig config = read_tokenizer_config(model_dir);
  if (fs::exists(json_path)) {
    const nlohmann::json json = read_json_file(json_path);
    // Llama-2-era repositories ship a Metaspace / byte-fallback tokenizer.json next to
    // tokenizer.model; that pipeline is served by the sentencepiece implementation.
    const bool byte_level_bpe = json.is_object() && json.contains("model") && json["model"].is_object() &&
                                json["model"].value("type", "BPE") == "BPE" &&
                                !json["model"].value("byte_fallback", false);
    if (byte_level_bpe || !fs::exists(spm_path)) return std::make_unique<BpeTokenizer>(json_path, json, config);
  }
  if (fs::exists(spm_path)) return std::make_unique<SentencePieceTokenizer>(spm_path, config);
  throw Error(model_dir + ": neither tokenizer.json nor tokenizer.model found");
}

}  // namespace finetune
