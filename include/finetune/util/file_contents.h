// Reading a whole file into memory.
#pragma once

#include <string>

namespace finetune {

// The file's bytes. Throws Error "<path>: cannot open <what>" when it cannot be opened and
// "<path>: read error" when reading fails part-way.
std::string read_file(const std::string& path, const std::string& what = "file");

}  // namespace finetune
