// Locating the reference fixtures that tests/reference/make_<module>_fixtures.py writes into
// $FINETUNE_FIXTURES/<module>/ (scripts/test.sh runs every generator first). A missing fixture
// throws, which fails the test: a reference comparison is never skipped.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace finetune {
namespace reference {

// $FINETUNE_FIXTURES/<module>/<name> (a file or a directory), which must exist.
inline std::string fixture_path(const std::string& module, const std::string& name) {
  const std::string generator = "tests/reference/make_" + module + "_fixtures.py $FINETUNE_FIXTURES/" + module;
  const char* root = std::getenv("FINETUNE_FIXTURES");
  if (root == nullptr || *root == '\0') {
    throw std::runtime_error("FINETUNE_FIXTURES is not set; run " + generator + " first (scripts/test.sh does)");
  }
  const std::string path = std::string(root) + "/" + module + "/" + name;
  if (!std::filesystem::exists(path)) throw std::runtime_error("missing fixture " + path + "; run " + generator);
  return path;
}

inline nlohmann::json load_json_fixture(const std::string& module, const std::string& name) {
  const std::string path = fixture_path(module, name);
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read fixture " + path);
  return nlohmann::json::parse(in);
}

}  // namespace reference
}  // namespace finetune
