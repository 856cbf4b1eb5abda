// Valid inputs the fuzz targets start from, built in code (small, and always in step with what the
// parsers accept; fuzz_main checks at start-up that every seed is accepted).
#pragma once

#include <string>
#include <vector>

namespace finetune::fuzz {

std::vector<std::string> safetensors_file_seeds();    // whole files: length, header, data
std::vector<std::string> safetensors_header_seeds();  // their JSON headers
std::vector<std::string> checkpoint_index_seeds();    // model.safetensors.index.json over kShardName
std::vector<std::string> model_config_seeds();        // config.json of each supported family
std::vector<std::string> tokenizer_json_seeds();      // byte-level BPE tokenizer.json
std::vector<std::string> tokenizer_config_seeds();    // tokenizer_config.json
std::vector<std::string> special_tokens_map_seeds();  // special_tokens_map.json
std::vector<std::string> sentencepiece_seeds();       // tokenizer.model (BPE ModelProto)
std::vector<std::string> dataset_jsonl_seeds();       // one file per row format
std::vector<std::string> dataset_json_seeds();
std::vector<std::string> option_file_seeds();         // --config FILE.json
std::vector<std::string> adapter_config_seeds();      // adapter_config.json
std::vector<std::string> parquet_rows_seeds();        // .parquet datasets (parquet_seeds.cpp: Arrow's writer)
std::vector<std::string> chat_template_seeds();       // chat templates (chat_template_seeds.cpp)
std::vector<std::string> percent_format_seeds();      // "FORMAT\0ARGS" (percent_format_seeds.cpp)
std::vector<std::string> hub_answers_seeds();         // "REPO_INFO\0HEAD\0INDEX" (hub_answers_seeds.cpp)

// The shard the checkpoint index seeds name, holding tensors "a" (F32 [2]) and "b" (BF16 [3]).
extern const char* const kShardName;
std::string checkpoint_shard_bytes();

// The tokenizer.json that the tokenizer_config / special_tokens_map targets load beside the input.
std::string base_tokenizer_json();

}  // namespace finetune::fuzz
