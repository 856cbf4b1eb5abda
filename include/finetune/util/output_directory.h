// Creating the directories finetune writes into (--output_dir, --save_path, checkpoints), with an
// error that names the path component in the way instead of a bare std::filesystem message.
#pragma once

#include <string>

namespace finetune {

// Creates `path` and its parents (no-op when it is already a directory). Throws Error naming
// `what` (e.g. "--output_dir") and `path`, and the ancestor that is a regular file when that is
// the cause.
void create_output_directory(const std::string& path, const std::string& what);

}  // namespace finetune
