#include "finetune/tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <fstream>
#include <set>
#include <sstream>

#include "finetune/tokenizer/decode_text.h"
#include "finetune/tokenizer/sentencepiece_proto.h"
#include "finetune/tokenizer/token_decoder.h"
#include "finetune/util/errors.h"
#include "finetune/util/file_contents.h"

namespace finetune {
namespace {

constexpr const char* kMetaspace = "\xE2\x96\x81";  // "▁"

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path, const TokenizerConfig& config)
    : path_(path), clean_up_tokenization_spaces_(config.clean_up_tokenization_spaces) {
  const std::string serialized = read_file(path);
  const SentencePieceModelInfo info = parse_sentencepiece_model(serialized, path);
  if (info.model_type != 2) {
    throw Error(path + ": trainer_spec.model_type is " + std::to_string(info.model_type) +
                "; transformers' LlamaTokenizer treats tokenizer.model as BPE, so only BPE models (2) are supported");
  }
  processor_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = processor_->LoadFromSerializedProto(without_sentencepiece_normalization(serialized, path));
  if (!status.ok()) throw Error(path + ": sentencepiece cannot load the model: " + status.ToString());

  std::set<int32_t> ids;
  for (size_t id = 0; id < info.pieces.size(); ++id) {
    const auto& entry = info.pieces[id];
    pieces_.push_back(entry.piece);
    ids.insert(static_cast<int32_t>(id));
    // Control pieces are special added tokens, user-defined pieces non-special ones (transformers'
    // SentencePieceExtractor).
    if (entry.type == SentencePieceEntry::kControl || entry.type == SentencePieceEntry::kUserDefined) {
      AddedToken token;
      token.content = entry.piece;
      token.id = static_cast<int32_t>(id);
      token.special = entry.type == SentencePieceEntry::kControl;
      added_.add(token);
    }
  }
  for (const auto& token : config.added_tokens_decoder) {
    added_.add(token);
    ids.insert(token.id);
  }
  // Named special tokens are added (as special) when not yet known.
  for (const auto* name : {&config.bos_token, &config.eos_token, &config.unk_token, &config.pad_token}) {
    if (!*name || added_.find_by_content(**name)) continue;
    const int id = processor_->PieceToId(**name);
    if (id == processor_->unk_id() && **name != pieces_[id]) continue;  // not in the model
    AddedToken token;
    token.content = **name;
    token.id = id;
    token.special = true;
    added_.add(token);
  }
  vocab_size_ = static_cast<int64_t>(ids.size());
  max_token_id_ = ids.empty() ? -1 : *ids.rbegin();

  const bool add_prefix_space = config.add_prefix_space.value_or(true);
  prepend_scheme_ = !add_prefix_space ? PrependScheme::kNever : config.legacy ? PrependScheme::kAlways : PrependScheme::kFirst;
  decoder_ = TokenDecoder::llama(add_prefix_space);

  auto id_of = [&](const std::optional<std::string>& token, const char* name) -> std::optional<int32_t> {
    if (!token) return std::nullopt;
    auto id = token_to_id(*token);
    if (!id) throw Error(path + ": " + name + " '" + *token + "' from tokenizer_config.json is not in the vocabulary");
    return id;
  };
  if (config.add_bos_token.value_or(false)) {
    if (auto id = id_of(config.bos_token, "bos_token")) prefix_ids_.push_back(*id);
  }
  if (config.add_eos_token.value_or(false)) {
    if (auto id = id_of(config.eos_token, "eos_token")) suffix_ids_.push_back(*id);
  }
  special_ = resolve_special_tokens(config, *this, path);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

void SentencePieceTokenizer::encode_plain(const std::string& text, bool at_text_start, std::vector<int32_t>& out) const {
  // Metaspace: spaces become "▁", then "▁" is prepended per the scheme unless already there.
  std::string metaspaced;
  metaspaced.reserve(text.size() + 8);
  for (char c : text) {
    if (c == ' ') {
      metaspaced += kMetaspace;
    } else {
      metaspaced += c;
    }
  }
  const bool starts_with_metaspace = metaspaced.rfind(kMetaspace, 0) == 0;
  const bool prepend = !starts_with_metaspace && (prepend_scheme_ == PrependScheme::kAlways ||
                                                  (prepend_scheme_ == PrependScheme::kFirst && at_text_start));
  if (prepend) metaspaced.insert(0, kMetaspace);
  std::vector<int> ids;
  const auto status = processor_->Encode(metaspaced, &ids);
  if (!status.ok()) throw Error(path_ + ": sentencepiece encode failed: " + status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<int32_t> SentencePieceTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  bool at_text_start = true;
  for (const auto& segment : added_.split(text, /*normalized=*/false)) {
    // No normalizer: tokens flagged `normalized` match the same text.
    for (const auto& inner : segment.added_id >= 0 ? std::vector<AddedTokenSplit>{segment}
                                                   : added_.split(segment.text, /*normalized=*/true)) {
      if (inner.added_id >= 0) {
        ids.push_back(inner.added_id);
      } else {
        encode_plain(inner.text, at_text_start, ids);
      }
      at_text_start = false;
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* added = added_.find_by_id(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
    } else if (id >= 0 && static_cast<size_t>(id) < pieces_.size()) {
      tokens.push_back(pieces_[id]);
    } else {
      throw Error(path_ + ": cannot decode token id " + std::to_string(id) + ": not in the vocabulary");
    }
  }
  const std::string text = decoder_.decode(std::move(tokens));
  return clean_up_tokenization_spaces_ ? clean_up_tokenization(text) : text;
}

std::optional<int32_t> SentencePieceTokenizer::token_to_id(const std::string& token) const {
  if (const AddedToken* added = added_.find_by_content(token)) return added->id;
  const int id = processor_->PieceToId(token);
  if (id == processor_->unk_id() && token != pieces_[id]) return std::nullopt;
  return id;
}

int64_t SentencePieceTokenizer::vocab_size() const { return vocab_size_; }

}  // namespace finetune
