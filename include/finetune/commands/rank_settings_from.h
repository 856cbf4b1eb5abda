// The settings every rank of a training run must share (Note [Ranks agree before the first step]
// in ddp/rank_settings.h), as values that compare by meaning: the model and an initial adapter by
// the content of their files (each node may hold them under another path), the data by the
// fingerprint of the tokenized samples, and the options that shape the update or the schedule of
// collectives by their parsed values.
#pragma once

#include <string>
#include <vector>

#include "finetune/config/options.h"
#include "finetune/ddp/rank_settings.h"
#include "finetune/train/trainer.h"
#include "finetune/train/training_state.h"

namespace finetune {

// A fingerprint of a model or adapter directory's files: for each regular file (sorted by name)
// its name, size and the SHA-256 of its first and last MiB (a safetensors header, a config's
// whole text), so equal content under any path agrees and reading a checkpoint costs milliseconds.
std::string directory_fingerprint(const std::string& dir);

std::vector<RankSetting> rank_settings_from(const Options& options, const RunIdentity& identity,
                                            const TrainerConfig& trainer, const std::string& model_dir);

}  // namespace finetune
