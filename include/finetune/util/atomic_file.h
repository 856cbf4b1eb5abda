// Whole-file writes that are atomic: write a temporary file beside the target, fsync, rename,
// fsync the directory. A crash mid-write never leaves a half-written file at `path`, and a failed
// write leaves no temporary file behind.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace finetune {

// Writes the concatenation of `parts` (pointer, byte count) to `path`. Errors name `path`.
void write_parts_atomically(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts);

void write_file_atomically(const std::string& path, const std::string& contents);

// Copies `from` to `to` atomically (same temp + rename discipline).
void copy_file_atomically(const std::string& from, const std::string& to);

}  // namespace finetune
