// Whole-file writes that are atomic: write a temporary file beside the target, fsync, rename,
// fsync the directory. A crash mid-write never leaves a half-written file at `path`, and a failed
// write leaves no temporary file behind.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace finetune {

// Appends `size` bytes from `data` to the file being written.
using AppendBytes = std::function<void(const void* data, size_t size)>;

// Writes to `path` what `write_contents` appends, in order, through the AppendBytes it is given
// (which writes straight to the temporary file: the contents need not all be in memory at once).
// An exception from `write_contents` leaves no file behind; errors name `path`.
void write_atomically(const std::string& path, const std::function<void(const AppendBytes&)>& write_contents);

// Writes the concatenation of `parts` (pointer, byte count) to `path`. Errors name `path`.
void write_parts_atomically(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts);

void write_file_atomically(const std::string& path, const std::string& contents);

// Copies `from` to `to` atomically (same temp + rename discipline).
void copy_file_atomically(const std::string& from, const std::string& to);

// fsyncs the directory holding `path`, making a rename into it durable; best effort, as some
// filesystems refuse fsync on directories.
void sync_parent_dir(const std::string& path);

}  // namespace finetune
