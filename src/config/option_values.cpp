#include "option_values.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "finetune/util/text.h"

namespace finetune {

std::string in_quotes(const std::string& s) { return "\"" + s + "\""; }

std::string format_double(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// ---- value converters (throw BadValue with what was expected and what was given)

int64_t parse_int(const std::string& text, int64_t min_value) {
  const std::string expected = min_value == std::numeric_limits<int64_t>::min()
                                   ? "expected an integer"
                                   : "expected an integer >= " + std::to_string(min_value);
  const std::string s = trim(text);
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE) throw BadValue(expected + ", got " + in_quotes(text));
  if (value < min_value) throw BadValue(expected + ", got " + in_quotes(text));
  return value;
}

std::string Interval::describe() const {
  const bool has_low = std::isfinite(low), has_high = std::isfinite(high);
  if (has_low && has_high)
    return std::string("in ") + (low_inclusive ? "[" : "(") + format_double(low) + ", " + format_double(high) +
           (high_inclusive ? "]" : ")");
  if (has_low) return (low_inclusive ? ">= " : "> ") + format_double(low);
  if (has_high) return (high_inclusive ? "<= " : "< ") + format_double(high);
  return "";
}

double parse_float(const std::string& text, const Interval& interval) {
  const std::string range = interval.describe();
  const std::string expected = "expected a number" + (range.empty() ? "" : " " + range);
  const std::string s = trim(text);
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(value))
    throw BadValue(expected + ", got " + in_quotes(text));
  // The options end up in 32-bit floats (optimizer and model tensors).
  if (std::fabs(value) > std::numeric_limits<float>::max())
    throw BadValue(expected + ", got " + in_quotes(text) + ", beyond a 32-bit float's range (about 3.4e38)");
  if (!interval.contains(value)) throw BadValue(expected + ", got " + in_quotes(text));
  return value;
}

// true/false/1/0 (case-insensitive), plus option-specific words that mean true.
bool parse_bool(const std::string& text, const std::vector<std::string>& extra_true_words) {
  const std::string s = lowercase(trim(text));
  if (s == "true" || s == "1") return true;
  if (s == "false" || s == "0") return false;
  for (const auto& word : extra_true_words)
    if (s == word) return true;
  std::string expected = "expected true, false, 1 or 0";
  for (const auto& word : extra_true_words) expected += " or " + in_quotes(word);
  throw BadValue(expected + ", got " + in_quotes(text));
}

std::vector<std::string> parse_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item = trim(item);
    if (item.empty()) throw BadValue("expected a comma-separated list without empty items, got " + in_quotes(text));
    items.push_back(item);
  }
  if (items.empty()) throw BadValue("expected a non-empty comma-separated list, got " + in_quotes(text));
  return items;
}

std::string parse_choice(const std::string& text, const ChoiceSet& set) {
  const std::string s = lowercase(trim(text));
  for (const auto& choice : set.choices)
    if (s == lowercase(choice)) return choice;
  for (const auto& alias : set.aliases)
    if (s == alias.first) return alias.second;
  const std::string supported = "supported: " + join(set.choices, ", ");
  for (const auto& bad : set.unsupported)
    if (s == bad.first) throw BadValue(in_quotes(text) + " is not supported (" + bad.second + "); " + supported);
  if (!set.unsupported_prefix.empty() && s.rfind(set.unsupported_prefix, 0) == 0)
    throw BadValue(in_quotes(text) + " is not supported (" + set.unsupported_prefix_reason + "); " + supported);
  throw BadValue("unknown value " + in_quotes(text) + "; " + supported);
}

}  // namespace finetune
