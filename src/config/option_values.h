// Converting option values from text, shared by the option table's bindings (option_table.cpp)
// and the parser (option_parser.cpp). Private to src/config/. Every converter throws BadValue
// saying what was expected and what was given; the caller prefixes the option's name and origin.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "finetune/config/options.h"

namespace finetune {

struct BadValue : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string in_quotes(const std::string& s);
std::string format_double(double value);

// Integers >= min_value.
int64_t parse_int(const std::string& text, int64_t min_value);

// A numeric interval; open ends are written as "(" / ")".
struct Interval {
  double low = -std::numeric_limits<double>::infinity();
  bool low_inclusive = true;
  double high = std::numeric_limits<double>::infinity();
  bool high_inclusive = true;

  bool contains(double v) const {
    return (low_inclusive ? v >= low : v > low) && (high_inclusive ? v <= high : v < high);
  }
  std::string describe() const;
};

inline const Interval kAnyNumber{};
inline const Interval kPositive{0.0, false};
inline const Interval kNonNegative{0.0, true};
inline const Interval kUnitHalfOpen{0.0, true, 1.0, false};  // [0, 1)
inline const Interval kUnitOpenClosed{0.0, false, 1.0, true};  // (0, 1]

// Finite numbers inside `interval`.
double parse_float(const std::string& text, const Interval& interval);

// true/false/1/0 (case-insensitive), plus option-specific words that mean true.
bool parse_bool(const std::string& text, const std::vector<std::string>& extra_true_words = {});

// A non-empty comma-separated list without empty items.
std::vector<std::string> parse_list(const std::string& text);

// Choice values: `choices` are stored as given, `aliases` map to a choice, `unsupported` maps a
// known-but-unimplemented value to the reason we reject it (with a better message than "unknown").
struct ChoiceSet {
  std::vector<std::string> choices;
  std::vector<std::pair<std::string, std::string>> aliases = {};
  std::vector<std::pair<std::string, std::string>> unsupported = {};
  std::string unsupported_prefix = "";  // any value starting with it is unsupported (e.g. gguf_*)
  std::string unsupported_prefix_reason = "";
};

// The choice `text` names (case-insensitive), resolving aliases.
std::string parse_choice(const std::string& text, const ChoiceSet& set);

// One row of the option table: its spec and the binding that converts, validates and stores a
// value into its Options field.
using Binding = std::function<void(Options&, const std::string&)>;
struct OptionRow {
  OptionSpec spec;
  Binding bind;
};

// The table (built once, immutable after) and a row by name or alias (nullptr when unknown).
const std::vector<OptionRow>& option_rows();
const OptionRow* find_option_row(const std::string& name);

// Options of Unsloth's CLI (unsloth-cli.py) that finetune does not have, with the reason: an
// Unsloth user who passes one is told why rather than only that it is unknown.
const std::vector<std::pair<std::string, std::string>>& unsloth_only_options();

// Help-text group order.
inline const char* const kOptionGroupOrder[] = {"model",  "LoRA",       "training", "preference", "data",
                                               "saving", "generation", "logging",  "distributed"};

}  // namespace finetune
