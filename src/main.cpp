// finetune: LoRA/SFT fine-tuning of Hugging Face causal LMs on LibTorch.
// main() wires the stages together and is the one place that catches errors:
//   launch env -> options -> device -> model + weights -> (LoRA) -> data -> eval | train
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "finetune/config/hf_hub.h"
#include "finetune/config/model_config.h"
#include "finetune/config/options.h"
#include "finetune/data/dataset.h"
#include "finetune/launch/launch_env.h"
#include "finetune/model/causal_lm.h"
#include "finetune/model/device_selection.h"
#include "finetune/model/weights.h"
#include "finetune/tokenizer/tokenizer.h"
#include "finetune/train/evaluate.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"

namespace finetune {
namespace {

bool has_tokenizer_files(const std::string& model_dir) {
  for (const char* name : {"/tokenizer.json", "/tokenizer.model"}) {
    if (FILE* f = std::fopen((model_dir + name).c_str(), "rb")) {
      std::fclose(f);
      return true;
    }
  }
  return false;
}

int run_eval(const Options& options, const EnvMap& env) {
  if (options.model_name.empty()) throw UsageError("--model_name: required");
  const std::string data_spec = options.eval_dataset.empty() ? options.dataset : options.eval_dataset;
  if (data_spec.empty()) throw UsageError("--dataset (or --eval_dataset): required for eval");
  const auto launch = launch_env_from(env);
  const auto model_dir = resolve_model_dir(options.model_name, env);
  const auto config = load_model_config(model_dir);
  const auto device = select_device(options.device, launch.local_rank);
  const auto dtype = select_dtype(options.dtype, device);

  CausalLM model(config, dtype, device);
  load_weights(model, model_dir);

  std::unique_ptr<Tokenizer> tokenizer;
  if (has_tokenizer_files(model_dir)) tokenizer = load_tokenizer(model_dir);
  DatasetOptions dataset_options;
  dataset_options.max_seq_length = options.max_seq_length;
  dataset_options.train_on_completions = options.train_on_completions;
  dataset_options.skip_bad_rows = options.skip_bad_rows;
  dataset_options.chat_format = chat_format_from_name(
      options.chat_template, tokenizer ? tokenizer->special_tokens().chat_template : "");
  const auto data = load_dataset(resolve_dataset_files(data_spec, env), tokenizer.get(), dataset_options);

  int64_t pad_token_id = config.pad_token_id.value_or(0);
  if (tokenizer && tokenizer->special_tokens().pad_token_id) pad_token_id = *tokenizer->special_tokens().pad_token_id;
  std::vector<int64_t> indices(data.samples.size());
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<int64_t>(i);
  const auto result = evaluate(model, data.samples, indices, options.per_device_eval_batch_size, pad_token_id,
                               options.dump_logits);

  nlohmann::json line = {{"loss", result.mean_loss()},
                         {"perplexity", result.perplexity()},
                         {"tokens", result.tokens},
                         {"rows", data.samples.size()},
                         {"rows_skipped", data.stats.rows_no_trainable + data.stats.rows_bad}};
  std::cout << line.dump() << std::endl;
  return 0;
}

int run_train(const Options&, const EnvMap&) {
  throw Error("training is not available yet in this build; use `finetune eval`");
}

}  // namespace
}  // namespace finetune

int main(int argc, char** argv) {
  using namespace finetune;
  log::configure(0, 1);
  try {
    const auto env = current_environment();
    const auto command = parse_command(argc, argv, env);
    if (command.help) {
      std::cout << command.help_text;
      return 0;
    }
    if (command.action == "eval") return run_eval(command.options, env);
    return run_train(command.options, env);
  } catch (const UsageError& e) {
    log::error(e.what());
    std::cerr << "Run `finetune --help` for the list of options." << std::endl;
    return 2;
  } catch (const std::exception& e) {
    log::error(e.what());
    return 1;
  }
}
