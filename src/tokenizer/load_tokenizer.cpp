// load_tokenizer(): picks the implementation for a model directory.
#include <filesystem>

#include "finetune/tokenizer/bpe_tokenizer.h"
#include "finetune/tokenizer/sentencepiece_tokenizer.h"
#include "finetune/tokenizer/tokenizer.h"
#include "finetune/tokenizer/tokenizer_class.h"
#include "finetune/tokenizer/tokenizer_config.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_fields.h"
#include "finetune/util/json_parse.h"
#include "finetune/util/path_status.h"

namespace finetune {
namespace {

// config.json's model_type, which AutoTokenizer consults with tokenizer_class (tokenizer_class.h).
std::optional<std::string> model_type_of(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  if (!exists_at(path, "the model's config")) return std::nullopt;
  const nlohmann::json json = read_json_file(path);
  if (!json.is_object()) return std::nullopt;
  const std::string type = json_string(json, "model_type", "", path, "<root>");
  if (type.empty()) return std::nullopt;
  return type;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (!is_directory_at(model_dir, "the tokenizer directory")) {
    throw Error(model_dir + ": tokenizer directory does not exist");
  }
  const std::string json_path = (fs::path(model_dir) / "tokenizer.json").string();
  const std::string spm_path = (fs::path(model_dir) / "tokenizer.model").string();
  const TokenizerConfig config = read_tokenizer_config(model_dir);
  if (exists_at(json_path, "the tokenizer")) {
    const TokenizerPipeline pipeline = transformers_pipeline(config.tokenizer_class, model_type_of(model_dir));
    return std::make_unique<BpeTokenizer>(json_path, read_json_file(json_path), config, pipeline);
  }
  if (exists_at(spm_path, "the tokenizer")) return std::make_unique<SentencePieceTokenizer>(spm_path, config);
  throw Error(model_dir + ": neither tokenizer.json nor tokenizer.model found");
}

}  // namespace finetune
