// Locating the data module's reference fixtures ($FINETUNE_FIXTURES/data/, written by
// tests/reference/make_data_fixtures.py). A missing fixture throws, which fails the test.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "../reference/fixtures.h"

namespace finetune {
namespace data_test {

inline nlohmann::json load_data_fixture(const std::string& name) { return reference::load_json_fixture("data", name); }

}  // namespace data_test
}  // namespace finetune
