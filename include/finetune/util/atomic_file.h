// Whole-file writes that are atomic: write a temporary file beside the target, fsync, rename.
// A crash mid-write never leaves a half-written file at `path`.
#pragma once

#include <string>

namespace finetune {

void write_file_atomically(const std::string& path, const std::string& contents);

// Copies `from` to `to` atomically (same temp + rename discipline).
void copy_file_atomically(const std::string& from, const std::string& to);

}  // namespace finetune
