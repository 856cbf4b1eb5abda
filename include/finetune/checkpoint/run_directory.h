// --output_dir as a run's home: what an earlier run left there, and the rule for reusing it.
// A directory holding another run's files (metrics, adapter, checkpoints, profiles) is refused,
// naming what was found, unless --overwrite_output_dir (those files are removed first) or
// --resume_from_checkpoint (the run continues there).
#pragma once

#include <string>
#include <vector>

namespace finetune {

// The names of earlier runs' files directly inside `output_dir` (sorted; empty when none or when
// the directory does not exist).
std::vector<std::string> run_artifacts(const std::string& output_dir);

// UsageError when `output_dir` holds run artifacts and neither flag allows reusing it.
void check_output_dir_reuse(const std::string& output_dir, bool overwrite_output_dir, bool resuming);

// Removes the run artifacts (only those: other files stay).
void clear_run_artifacts(const std::string& output_dir);

}  // namespace finetune
