// The chat-template engine's reference fixtures ($FINETUNE_FIXTURES/template/, written by
// tests/reference/make_template_fixtures.py): JSON read with key order kept, as the render context
// must be. A missing fixture throws, which fails the test.
#pragma once

#include <ctime>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../reference/fixtures.h"
#include "finetune/template/template.h"

namespace finetune {
namespace template_test {

inline nlohmann::ordered_json load_template_fixture(const std::string& name) {
  const std::string path = reference::fixture_path("template", name);
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read fixture " + path);
  return nlohmann::ordered_json::parse(in);
}

// The generator pins strftime_now to 2024-07-26 13:05:09 (a Friday, day 208 of a leap year).
inline jinja::TemplateOptions pinned_clock_options() {
  jinja::TemplateOptions options;
  options.local_time = [] {
    std::tm now{};
    now.tm_year = 2024 - 1900;
    now.tm_mon = 6;
    now.tm_mday = 26;
    now.tm_hour = 13;
    now.tm_min = 5;
    now.tm_sec = 9;
    now.tm_wday = 5;
    now.tm_yday = 207;
    now.tm_isdst = -1;
    return now;
  };
  return options;
}

}  // namespace template_test
}  // namespace finetune
