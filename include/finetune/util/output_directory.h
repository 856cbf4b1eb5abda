// Creating the directories finetune writes into (--output_dir, --save_path, checkpoints), with an
// error that names the path component in the way instead of a bare std::filesystem message; and
// the rule that keeps them apart from the model a run reads.
#pragma once

#include <string>

namespace finetune {

// Creates `path` and its parents (no-op when it is already a directory). Throws Error naming
// `what` (e.g. "--output_dir") and `path`, and the ancestor that is a regular file when that is
// the cause.
void create_output_directory(const std::string& path, const std::string& what);

// Where a run writes, beside what it reads: --output_dir, --save_path ("" when no merged model is
// saved), the model's directory (a local one, or the hub cache's snapshot of --model_name) and
// the hub cache root ("" when none).
struct OutputPlacement {
  std::string output_dir;
  std::string save_path;
  std::string model_name;
  std::string model_dir;
  std::string hub_cache;
};

// UsageError naming both options when --output_dir or --save_path is the file system root, the
// model directory or inside it, or inside the hub cache's folder of that model
// (models--ORG--NAME): the run would overwrite or mix files with the base model. Paths are
// compared canonical (links, "." and ".." resolved; a path that does not exist yet by its
// existing ancestors).
void check_outputs_apart_from_model(const OutputPlacement& placement);

}  // namespace finetune
