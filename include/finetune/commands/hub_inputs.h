// The hub stage of a run: which --model_name / --dataset / --eval_dataset values are hub ids to
// fetch (hub/hub_fetch.h), and fetching them once per node under DDP.
#pragma once

#include <functional>
#include <string>

#include "finetune/commands/stage_configs.h"
#include "finetune/ddp/communicator.h"
#include "finetune/hub/hub_fetch.h"
#include "finetune/launch/launch_env.h"

namespace finetune {

// Hub ids among the run's inputs (a value that is an existing path is local, never fetched).
// `training`: --dataset's --dataset_split is read (train), or only --eval_dataset when given (eval).
HubInputs hub_inputs_from(const ModelSource& model, const DataSetup& data, bool training);

// The hub stage of a single-process command: fetch_hub_inputs at once (run_setup.h: open_model).
std::function<void(const HubInputs&)> fetch_at_once(const HubSettings& settings);

// Whether --model_name is written as a local path rather than a hub id ORG/NAME: it starts with
// /, ./, ../ or ~, has more than one '/', or its part before the '/' is a directory here
// (models/qwen4 beside a models/ directory).
bool is_path_like(const std::string& model_name);

// A path-like --model_name that does not exist is an Error saying so ("not found"), before any
// hub request: a typo of a local path must not turn into a download attempt.
void check_local_model_path(const std::string& model_name);

// Note [One download per node]
// Local rank 0 of each node fetches; its node's other ranks wait for the key
// "hub_fetch/<host name>" on the rendezvous store (Communicator::wait_for: the DDP timeout bounds
// the wait, a dead downloader ends it at once), then read the cache it filled. The downloader
// publishes "ok", or its error, which the waiting ranks raise as their own, so every rank stops with
// the same one-line message. No collective runs behind the rank check.
void fetch_hub_inputs_per_node(const HubSettings& settings, const HubInputs& inputs, const LaunchEnv& launch,
                               Communicator& communicator);

}  // namespace finetune
