// load_tokenizer(): picks the implementation for a model directory.
#include <filesystem>

#include "finetune/tokenizer/bpe_tokenizer.h"
#include "finetune/tokenizer/sentencepiece_tokenizer.h"
#include "finetune/tokenizer/tokenizer.h"
#include "finetune/tokenizer/tokenizer_config.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_fields.h"
#include "finetune/util/json_parse.h"

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
    const nlohmann::json* model = json.is_object() ? json_field(json, "model", json_path, "<root>") : nullptr;
    const bool byte_level_bpe = model && model->is_object() && json_string(*model, "type", "BPE", json_path, "model") == "BPE" &&
                                !json_bool(*model, "byte_fallback", false, json_path, "model");
    if (byte_level_bpe || !fs::exists(spm_path)) return std::make_unique<BpeTokenizer>(json_path, json, config);
  }
  if (fs::exists(spm_path)) return std::make_unique<SentencePieceTokenizer>(spm_path, config);
  throw Error(model_dir + ": neither tokenizer.json nor tokenizer.model found");
}

}  // namespace finetune
