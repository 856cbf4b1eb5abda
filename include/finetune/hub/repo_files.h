// Which files of a hub repo finetune needs, so that a download fetches nothing else:
//   model    the top-level configuration, tokenizer and chat-template files (*.json, *.model,
//            *.jinja, *.txt, *.tiktoken) and the safetensors weights: the shards that
//            model.safetensors.index.json names, else model.safetensors (never *.bin, *.pth, *.pt,
//            *.h5, *.msgpack, *.onnx, *.gguf, nor files in sub-folders such as original/);
//   dataset  the data files of the wanted splits as HF datasets finds them (data_file_splits.h).
#pragma once

#include <string>
#include <vector>

namespace finetune {

// The files to fetch first (everything but the shards of an index); throws naming the repo when
// it has no safetensors weights (finetune reads no other format).
std::vector<std::string> model_files_without_shards(const std::string& what, const std::vector<std::string>& listing);

inline constexpr const char* kSafetensorsIndex = "model.safetensors.index.json";

// The shard files an index's weight_map names (sorted, unique); throws naming the index file.
std::vector<std::string> shards_of_index(const std::string& index_path);

}  // namespace finetune
