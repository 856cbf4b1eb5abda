// Looking at a path without std::filesystem's throwing overloads: a path from the user or a model
// directory (a name too long for the file system, a parent without search permission) is an Error
// naming it, caught in main like every other, never a bare std::filesystem_error.
#pragma once

#include <filesystem>
#include <string>

namespace finetune {

// What is at `path`, links followed: file_type::not_found when nothing is there (ENOENT, or a
// parent that is not a directory, as std::filesystem::status reports them). Any other failure to
// look is an Error "<path>: cannot look at <what> (<reason>)".
std::filesystem::file_type file_type_at(const std::string& path, const std::string& what);

// file_type_at(...) is a regular file / a directory / anything.
bool is_regular_file_at(const std::string& path, const std::string& what);
bool is_directory_at(const std::string& path, const std::string& what);
bool exists_at(const std::string& path, const std::string& what);

}  // namespace finetune
