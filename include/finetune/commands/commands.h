// The two actions of the `finetune` executable, each wiring the stages end to end:
//   train: launch env -> communicator -> model + weights -> LoRA -> data -> trainer -> save/export
//   eval:  model + weights (+ adapter) -> data -> mean token loss / perplexity (one JSON line)
#pragma once

#include "finetune/config/options.h"

namespace finetune {

int run_train(const Options& options, const EnvMap& env);
int run_eval(const Options& options, const EnvMap& env);

}  // namespace finetune
