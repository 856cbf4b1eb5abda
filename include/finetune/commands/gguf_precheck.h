// What a GGUF export at the end of training needs, checked before training starts
// (--save_model with --save_method gguf or --save_gguf): the architecture has a GGUF name, the
// tokenizer's vocabulary converts (check_gguf_vocabulary: sentencepiece or a byte-level BPE whose
// pre-tokenizer llama.cpp knows), and every --quantization type can encode the model's rows
// (q4_0 and q5_0 have no fallback in llama.cpp's quantizer for rows that are not a multiple of
// 32 values). Otherwise the run would train for hours and then fail at its final save.
#pragma once

#include <string>
#include <vector>

#include "finetune/io/model_config.h"

namespace finetune {

// UsageError naming --save_gguf / --save_method gguf (`option`) and what cannot be exported.
void check_gguf_export_possible(const ModelConfig& config, const std::string& model_dir,
                                const std::vector<std::string>& quantizations, const std::string& option);

}  // namespace finetune
