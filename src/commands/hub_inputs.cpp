#include "finetune/commands/hub_inputs.h"

#include <algorithm>
#include <filesystem>

#include "finetune/data/data_file_splits.h"
#include "finetune/hub/cache_lookup.h"
#include "finetune/launch/environment.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

bool is_hub_id(const std::string& value) {
  std::error_code ec;
  return looks_like_hub_id(value) && !std::filesystem::exists(value, ec);
}

bool is_model_hub_id(const std::string& value) { return is_hub_id(value) && !is_path_like(value); }

DatasetWanted& wanted_entry(HubInputs& inputs, const std::string& id) {
  for (auto& dataset : inputs.datasets)
    if (dataset.id == id) return dataset;
  inputs.datasets.push_back({id, {}, false});
  return inputs.datasets.back();
}

void add_split(DatasetWanted& wanted, const std::string& split) {
  if (std::find(wanted.splits.begin(), wanted.splits.end(), split) == wanted.splits.end()) wanted.splits.push_back(split);
}

}  // namespace

HubInputs hub_inputs_from(const ModelSource& model, const DataSetup& data, bool training) {
  HubInputs inputs;
  if (is_model_hub_id(model.model_name)) inputs.model = model.model_name, inputs.revision = model.revision;
  const auto& datasets = data.datasets;
  const bool eval_only = !training && !data.eval_dataset.empty();
  if (!eval_only) {
    for (const auto& dataset : datasets)
      if (is_hub_id(dataset)) add_split(wanted_entry(inputs, dataset), data.dataset_split);
  }
  const std::string& eval = data.eval_dataset;
  std::error_code ec;
  if (!eval.empty() && !std::filesystem::exists(eval, ec)) {
    if (looks_like_hub_id(eval)) {
      wanted_entry(inputs, eval).eval_preference = true;
    } else if (is_split_name(eval) && !datasets.empty() && is_hub_id(datasets.front())) {
      add_split(wanted_entry(inputs, datasets.front()), eval);  // a split of --dataset
    }
  }
  return inputs;
}

std::function<void(const HubInputs&)> fetch_at_once(const HubSettings& settings) {
  return [settings](const HubInputs& inputs) { fetch_hub_inputs(settings, inputs); };
}

bool is_path_like(const std::string& model_name) {
  for (const char* prefix : {"/", "./", "../", "~"})
    if (starts_with(model_name, prefix)) return true;
  const auto slash = model_name.find('/');
  if (slash == std::string::npos) return model_name == "." || model_name == "..";
  if (model_name.find('/', slash + 1) != std::string::npos) return true;
  std::error_code ec;
  return std::filesystem::is_directory(model_name.substr(0, slash), ec);
}

void check_local_model_path(const std::string& model_name) {
  std::error_code ec;
  if (!is_path_like(model_name) || std::filesystem::exists(model_name, ec)) return;
  throw Error("--model_name: local directory " + model_name + " not found (no such directory; a path, not a hub id "
              "ORG/NAME, so nothing is downloaded)");
}

void fetch_hub_inputs_per_node(const HubSettings& settings, const HubInputs& inputs, const LaunchEnv& launch,
                               Communicator& communicator) {
  if (inputs.empty() || settings.offline) return;
  const std::string key = "hub_fetch/" + host_name();
  if (launch.local_rank == 0) {
    try {
      fetch_hub_inputs(settings, inputs);
    } catch (const std::exception& e) {
      if (launch.local_world_size > 1) communicator.publish(key, std::string("error\n") + e.what());
      throw;
    }
    if (launch.local_world_size > 1) communicator.publish(key, "ok");
    return;
  }
  log::info("waiting for local rank 0 to fetch " + inputs.describe() + " from " + settings.endpoint);
  const std::string outcome = communicator.wait_for(key, "the hub download of " + inputs.describe() + " by local rank 0");
  if (outcome.rfind("error\n", 0) == 0) throw Error(outcome.substr(6));
}

}  // namespace finetune
