// The actions of the `finetune` executable, each wiring the stages end to end:
//   train:    launch env -> communicator -> model + weights -> LoRA -> data -> trainer -> save/export
//   eval:     model + weights (+ adapter) -> data -> mean token loss / perplexity (one JSON line)
//   generate: model + weights (+ adapter) -> prompts -> decoded continuations (streamed / JSONL)
//   chat:     model + weights (+ adapter) -> the chat template -> an interactive conversation
//   export:   model + weights (+ adapter) -> merged_16bit | merged_4bit | gguf, without training
//   dpo/orpo: train's stages on preference pairs, with TRL's DPO / ORPO objective
#pragma once

#include <string>

#include "finetune/config/options.h"

namespace finetune {

int run_train(const Options& options, const EnvMap& env);
int run_eval(const Options& options, const EnvMap& env);
int run_generate(const Options& options, const EnvMap& env);
int run_chat(const Options& options, const EnvMap& env);
int run_export(const Options& options, const EnvMap& env);
int run_dpo(const Options& options, const EnvMap& env);
int run_orpo(const Options& options, const EnvMap& env);

// `finetune --version`: finetune's version (CMake's project version) and the LibTorch and CUDA it
// was built with ("CPU only" without CUDA).
std::string version_text();

}  // namespace finetune
