// `finetune export`: model + weights (+ --adapter) -> merged_16bit | merged_4bit | gguf in
// --save_path, without training (see commands.h). The same export as the end of training
// (export/model_export.h), so both write identical files. Prints one JSON line naming the GGUF
// files written and every file in --save_path after the export.
#include <algorithm>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "finetune/export/gguf_push.h"
#include "finetune/export/model_export.h"
#include "finetune/commands/commands.h"
#include "finetune/commands/hub_inputs.h"
#include "finetune/commands/run_setup.h"
#include "finetune/commands/stage_configs.h"
#include "finetune/hub/cache_lookup.h"
#include "finetune/hub/hub_settings.h"
#include "finetune/launch/launch_env.h"
#include "finetune/model/device_selection.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"
#include "finetune/util/output_directory.h"

namespace finetune {
namespace {

// The files in `directory` after the export (sorted paths): what a user finds there.
std::vector<std::string> files_in(const std::string& directory) {
  std::vector<std::string> files;
  std::error_code error;
  for (std::filesystem::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    if (it->is_regular_file(error)) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int run_export(const Options& options, const EnvMap& env) {
  const auto setup = model_stage_setup_from(options, Action::Export);
  auto export_config = export_setup_from(options).export_config;
  if (export_config.save_path.empty()) throw UsageError("--save_path: export needs a directory to write into");
  // --save_path beside the model, as train's (output_directory.h): a merged export into the model's
  // own directory would overwrite the base weights it was merged from.
  const auto check_save_path = [&] {
    const auto& source = setup.source;
    check_outputs_apart_from_model({"", export_config.save_path, source.model_name,
                                    resolve_model_dir(source.model_name, env, source.revision), hub_cache_root(env)});
  };
  auto opened = open_model(setup, hub_inputs_from(setup.source, DataSetup{}, false), env,
                           command_device(setup.source, env), fetch_at_once(hub_settings_from(env, options.hub_token)),
                           check_save_path);
  const LoraConfig lora = opened.adapter ? opened.adapter->config : setup.adapter.lora;
  auto& loaded = opened.loaded;

  create_output_directory(export_config.save_path, "--save_path");
  const auto gguf_files = export_model(*loaded.model, lora, export_config, loaded.model_dir);
  log::info("model exported to " + export_config.save_path + " (" + save_method_name(export_config.save_method) + ")");
  if (!export_config.push_gguf.empty()) {
    log::info("pushed: " + push_gguf_files(hub_settings_from(env, options.hub_token), export_config.push_gguf,
                                           export_config.hub_private_repo, gguf_files));
  }
  std::cout << nlohmann::json{{"save_method", save_method_name(export_config.save_method)},
                              {"save_path", export_config.save_path},
                              {"adapter", options.adapter},
                              {"gguf_files", gguf_files},
                              {"files", files_in(export_config.save_path)}}
                   .dump()
            << std::endl;
  return 0;
}

}  // namespace finetune
