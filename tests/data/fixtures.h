// Locating the data module's reference fixtures ($FINETUNE_FIXTURES/data/, written by
// tests/reference/make_data_fixtures.py). A missing fixture throws, which fails the test.
#pragma once

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace finetune {
namespace data_test {

inline nlohmann::json load_data_fixture(const std::string& name) {
  const char* root = std::getenv("FINETUNE_FIXTURES");
  if (root == nullptr || *root == '\0') {
    throw std::runtime_error("FINETUNE_FIXTURES is not set; run tests/reference/make_data_fixtures.py "
                             "$FINETUNE_FIXTURES/data first (scripts/test.sh does)");
  }
  const std::string path = std::string(root) + "/data/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing fixture " + path + "; run tests/reference/make_data_fixtures.py");
  return nlohmann::json::parse(in);
}

}  // namespace data_test
}  // namespace finetune
