// How Python prints values: str() (what {{ x }} outputs) and repr() (lists and dicts print their
// items' repr), and json.dumps as transformers' tojson filter calls it.
#pragma once

#include <optional>
#include <string>

#include "value.h"

namespace finetune::jinja {

std::string python_str(const Value& value);   // str(x); Undefined prints as ""
std::string python_repr(const Value& value);  // repr(x)

std::string python_float_repr(double value);           // repr(float): shortest round-trip digits
std::string python_string_repr(const std::string& text);  // repr(str), with Python's choice of quotes

// json.dumps(x, ensure_ascii=..., indent=..., separators=..., sort_keys=...).
struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // per level; an int indent n is n spaces
  std::optional<std::pair<std::string, std::string>> separators;  // item, key
  bool sort_keys = false;
};
std::string python_json_dumps(const Value& value, const JsonDumpOptions& options);

}  // namespace finetune::jinja
