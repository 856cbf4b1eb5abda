#include "finetune/util/file_contents.h"

#include <fstream>
#include <sstream>

#include "finetune/util/errors.h"

namespace finetune {

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open " + what);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw Error(path + ": read error");
  return buffer.str();
}

}  // namespace finetune
