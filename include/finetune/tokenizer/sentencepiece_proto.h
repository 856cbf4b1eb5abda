// Just enough of sentencepiece's ModelProto wire format (no protobuf dependency) to read the piece
// list and to switch off sentencepiece's own normalization, so that libsentencepiece tokenizes
// exactly the text the transformers pipeline hands its BPE model (see sentencepiece_tokenizer.h).
#pragma once

#include <string>
#include <vector>

namespace finetune {

struct SentencePieceEntry {
  enum Type { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  std::string piece;
  int type = kNormal;
};

struct SentencePieceModelInfo {
  std::vector<SentencePieceEntry> pieces;
  int model_type = 1;  // TrainerSpec.model_type: 1 unigram, 2 bpe, 3 word, 4 char
};

// Throws finetune::Error (naming `path`) when the bytes are not a ModelProto.
SentencePieceModelInfo parse_sentencepiece_model(const std::string& serialized, const std::string& path);

// The same model with NormalizerSpec {add_dummy_prefix, remove_extra_whitespaces} = false, no
// precompiled charsmap or rule TSV, and no self-test data (which would no longer hold).
std::string without_sentencepiece_normalization(const std::string& serialized, const std::string& path);

}  // namespace finetune
