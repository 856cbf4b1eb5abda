// `finetune eval`: model + weights (+ adapter) -> data -> mean token loss / perplexity (one JSON line).
#include <iostream>

#include <nlohmann/json.hpp>

#include "finetune/commands/commands.h"
#include "finetune/commands/hub_inputs.h"
#include "finetune/commands/run_setup.h"
#include "finetune/commands/stage_configs.h"
#include "finetune/launch/launch_env.h"
#include "finetune/model/device_memory.h"
#include "finetune/model/device_selection.h"
#include "finetune/train/evaluate.h"
#include "finetune/util/errors.h"

namespace finetune {

int run_eval(const Options& options, const EnvMap& env) {
  const auto data_setup = data_setup_from(options);
  const auto setup = model_stage_setup_from(options, Action::Eval);
  const auto device = command_device(setup.source, env);
  std::vector<DatasetSplit> splits;
  auto opened = open_model(setup, hub_inputs_from(setup.source, data_setup, false), env, device,
                           fetch_at_once(hub_settings_from(env, options.hub_token)),
                           [&] { splits = eval_command_splits(data_setup, env); });  // before the model: fails fast
  auto& loaded = opened.loaded;
  const auto memory_after_load = peak_device_memory_gib(device);
  DataSetup eval_setup = data_setup;  // every split's rows, unweighted, nothing held out
  eval_setup.dataset_weights.assign(splits.size(), 1.0);
  eval_setup.eval_split = 0;
  eval_setup.raw_text_file.clear();
  const auto data = load_datasets(DataSplits{splits, std::nullopt}, eval_setup, loaded.tokenizer.get(),
                                  loaded.model->config().vocab_size).train;

  std::vector<int64_t> indices(data.samples.size());
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<int64_t>(i);
  const auto result = evaluate(*loaded.model, data.samples, indices, options.per_device_eval_batch_size,
                               pad_token_id_for(*loaded.model, loaded.tokenizer.get()), options.dump_logits);
  nlohmann::json line = {{"loss", result.mean_loss()},
                         {"perplexity", result.perplexity()},
                         {"tokens", result.tokens},
                         {"rows", data.samples.size()},
                         {"rows_skipped", data.stats.rows_no_trainable + data.stats.rows_bad},
                         {"load_seconds", loaded.load_seconds}};
  if (memory_after_load) line["memory_after_load_gib"] = *memory_after_load;
  if (const auto peak = peak_device_memory_gib(device)) line["peak_memory_gib"] = *peak;
  std::cout << line.dump() << std::endl;
  return 0;
}

}  // namespace finetune
