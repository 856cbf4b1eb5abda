// Filters on strings and numbers, with jinja2's semantics (its filters.py) and transformers' tojson.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "filters.h"
#include "python_format.h"
#include "python_repr.h"
#include "python_text.h"
#include "renderer.h"

namespace finetune::jinja {
namespace {

// `markup`: jinja2's soft_str keeps markupsafe's Markup, whose str methods return Markup.
Value text_result(Renderer& renderer, std::string text, bool markup = false) {
  renderer.charge_size(text.size());
  return Value::string(std::move(text), markup);
}

bool is_markup(const Value& value) { return value.is_string() && value.markup(); }

// Python's int(text, base) for a string (whitespace around, sign, _ between digits, 0x/0o/0b).
std::optional<int64_t> parse_python_int(const std::string& input, int64_t base) {
  const std::string text = python_strip(input, std::nullopt, true, true);
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  auto has_prefix = [&](char letter) {
    return i + 1 < text.size() && text[i] == '0' && std::tolower(static_cast<unsigned char>(text[i + 1])) == letter;
  };
  bool prefixed = false;
  if ((base == 0 || base == 16) && has_prefix('x')) {
    base = 16;
    prefixed = true;
  } else if ((base == 0 || base == 8) && has_prefix('o')) {
    base = 8;
    prefixed = true;
  } else if ((base == 0 || base == 2) && has_prefix('b')) {
    base = 2;
    prefixed = true;
  }
  if (prefixed) i += 2;
  const bool base_zero_decimal = base == 0;
  if (base == 0) base = 10;
  if (base < 2 || base > 36) return std::nullopt;  // a ValueError in Python, handled the same way
  const size_t digits_start = i;
  uint64_t value = 0;
  bool any = false;
  bool last_underscore = prefixed;  // "0x_1" allows one underscore after the prefix
  bool all_zero = true;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '_') {
      if (!any && !(prefixed && i == digits_start)) return std::nullopt;
      if (any && last_underscore) return std::nullopt;
      last_underscore = true;
      continue;
    }
    int digit;
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digit = c - '0';
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      digit = std::tolower(static_cast<unsigned char>(c)) - 'a' + 10;
    } else {
      return std::nullopt;
    }
    if (digit >= base) return std::nullopt;
    all_zero = all_zero && digit == 0;
    if (value > (std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(digit)) / static_cast<uint64_t>(base)) {
      throw RenderFailure("integer " + input + " does not fit in 64 bits");
    }
    value = value * static_cast<uint64_t>(base) + static_cast<uint64_t>(digit);
    any = true;
    last_underscore = false;
  }
  if (!any || last_underscore) return std::nullopt;
  // Base 0 refuses leading zeros in a decimal number ("010").
  if (base_zero_decimal && !prefixed && text[digits_start] == '0' && !all_zero) return std::nullopt;
  if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + (negative ? 1 : 0)) {
    throw RenderFailure("integer " + input + " does not fit in 64 bits");
  }
  return negative ? static_cast<int64_t>(0 - value) : static_cast<int64_t>(value);
}

// Python's float(text): whitespace around, sign, digits with single _ between them, a fraction,
// an exponent, or inf / infinity / nan in any case.
std::optional<double> parse_python_float(const std::string& input) {
  const std::string text = python_strip(input, std::nullopt, true, true);
  std::string clean;
  size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) clean += text[i++];
  std::string rest = text.substr(i);
  std::string lower;
  for (const char c : rest) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "inf" || lower == "infinity") return clean == "-" ? -INFINITY : INFINITY;
  if (lower == "nan") return NAN;
  auto digits = [&](size_t& p) {
    const size_t start = p;
    while (p < rest.size()) {
      if (std::isdigit(static_cast<unsigned char>(rest[p]))) {
        clean += rest[p++];
      } else if (rest[p] == '_' && p > start && p + 1 < rest.size() && std::isdigit(static_cast<unsigned char>(rest[p + 1]))) {
        ++p;
      } else {
        break;
      }
    }
    return p > start;
  };
  size_t p = 0;
  const bool whole = digits(p);
  bool fraction = false;
  if (p < rest.size() && rest[p] == '.') {
    clean += rest[p++];
    fraction = digits(p);
  }
  if (!whole && !fraction) return std::nullopt;
  if (p < rest.size() && (rest[p] == 'e' || rest[p] == 'E')) {
    clean += rest[p++];
    if (p < rest.size() && (rest[p] == '+' || rest[p] == '-')) clean += rest[p++];
    if (!digits(p)) return std::nullopt;
  }
  if (p != rest.size()) return std::nullopt;
  return std::strtod(clean.c_str(), nullptr);
}

Value filter_abs(Renderer&, const Value& value, Arguments& args) {
  no_arguments("abs", args);
  if (value.is_integral()) {
    if (value.as_int() == std::numeric_limits<int64_t>::min()) throw RenderFailure("integer result does not fit in 64 bits");
    return Value::integer(std::llabs(value.as_int()));
  }
  if (value.is_float()) return Value::number(std::fabs(value.as_double()));
  throw RenderFailure("bad operand type for abs(): '" + type_name(value) + "'");
}

Value filter_int(Renderer&, const Value& value, Arguments& args) {
  auto bound = bind_arguments("int", args, {"default", "base"});
  const Value fallback = bound[0] ? *bound[0] : Value::integer(0);
  if (value.is_undefined()) throw_undefined(value);
  if (value.is_integral()) return Value::integer(value.as_int());
  // jinja2: int(value[, base]); on TypeError/ValueError int(float(value)), whose failures (an
  // OverflowError for infinity included) give the default. int(inf) itself is an OverflowError.
  std::optional<double> number;
  if (value.is_string()) {
    const int64_t base = bound[1] ? (bound[1]->is_integral() ? bound[1]->as_int() : -1) : 10;
    if (base >= 0) {
      if (const auto parsed = parse_python_int(value.as_string(), base)) return Value::integer(*parsed);
    }
    number = parse_python_float(value.as_string());
    if (number && std::isinf(*number)) return fallback;
  } else if (value.is_float()) {
    number = value.as_double();
    if (std::isinf(*number)) throw RenderFailure("cannot convert float infinity to integer");
  }
  if (!number || std::isnan(*number)) return fallback;
  if (std::fabs(*number) >= 9223372036854775808.0) throw RenderFailure("integer result does not fit in 64 bits");
  return Value::integer(static_cast<int64_t>(*number));
}

Value filter_float(Renderer&, const Value& value, Arguments& args) {
  auto bound = bind_arguments("float", args, {"default"});
  const Value fallback = bound[0] ? *bound[0] : Value::number(0.0);
  if (value.is_undefined()) throw_undefined(value);
  if (value.is_number()) return Value::number(value.as_double());
  if (value.is_string()) {
    if (const auto parsed = parse_python_float(value.as_string())) return Value::number(*parsed);
  }
  return fallback;
}

// Python's round(x, n) for a float: correctly rounded, ties to even (printf rounds the exact
// binary value the same way).
double round_float(double value, int64_t digits) {
  if (!std::isfinite(value) || digits > 300) return value;
  if (digits >= 0) {
    char buffer[512];
    std::snprintf(buffer, sizeof(buffer), "%.*f", static_cast<int>(digits), value);
    return std::strtod(buffer, nullptr);
  }
  if (digits < -308) return std::copysign(0.0, value);
  const double scale = std::pow(10.0, static_cast<double>(-digits));
  return std::nearbyint(value / scale) * scale;  // default rounding mode: ties to even
}

Value filter_round(Renderer&, const Value& value, Arguments& args) {
  auto bound = bind_arguments("round", args, {"precision", "method"});
  const int64_t precision = bound[0] ? (bound[0]->is_integral() ? bound[0]->as_int() : 0) : 0;
  if (bound[0] && !bound[0]->is_integral()) {
    throw RenderFailure("'" + type_name(*bound[0]) + "' object cannot be interpreted as an integer");
  }
  const std::string method = bound[1] ? soft_str(*bound[1]) : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    throw RenderFailure("method must be common, ceil or floor");
  }
  if (value.is_undefined()) throw RenderFailure("type Undefined doesn't define __round__ method");
  if (!value.is_number()) {
    throw RenderFailure("type " + type_name(value) + " doesn't define __round__ method");
  }
  if (method == "common") {
    if (value.is_integral()) {
      if (precision >= 0) return Value::integer(value.as_int());
      if (precision < -18) return Value::integer(0);
      int64_t scale = 1;
      for (int64_t i = 0; i < -precision; ++i) scale *= 10;
      const int64_t v = value.as_int();
      int64_t quotient = v / scale;
      int64_t remainder = v % scale;
      if (remainder < 0) {
        remainder += scale;
        --quotient;
      }
      if (remainder * 2 > scale || (remainder * 2 == scale && (quotient & 1) != 0)) ++quotient;
      return Value::integer(quotient * scale);
    }
    return Value::number(round_float(value.as_double(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = value.as_double() * scale;
  return Value::number((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value filter_lower(Renderer& renderer, const Value& value, Arguments& args) {
  no_arguments("lower", args);
  return text_result(renderer, python_lower(soft_str(value)), is_markup(value));
}

Value filter_upper(Renderer& renderer, const Value& value, Arguments& args) {
  no_arguments("upper", args);
  return text_result(renderer, python_upper(soft_str(value)), is_markup(value));
}

Value filter_capitalize(Renderer& renderer, const Value& value, Arguments& args) {
  no_arguments("capitalize", args);
  return text_result(renderer, python_capitalize(soft_str(value)), is_markup(value));
}

// jinja2's title: words start after "-", whitespace or an opening bracket; each piece becomes
// upper(first character) + lower(rest).
Value filter_title(Renderer& renderer, const Value& value, Arguments& args) {
  no_arguments("title", args);
  const std::vector<char32_t> text = decode_utf8(soft_str(value));
  auto separator = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_python_space(c); };
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const bool in_separator = separator(text[i]);
    size_t end = i;
    while (end < text.size() && separator(text[end]) == in_separator) ++end;
    std::string first;
    append_utf8(first, text[i]);
    out += python_upper(first);
    out += python_lower(encode_utf8(std::vector<char32_t>(text.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                                          text.begin() + static_cast<std::ptrdiff_t>(end))));
    i = end;
  }
  return text_result(renderer, std::move(out));
}

Value filter_trim(Renderer&, const Value& value, Arguments& args) {
  auto bound = bind_arguments("trim", args, {"chars"});
  std::optional<std::string> chars;
  if (bound[0] && !bound[0]->is_none()) {
    if (!bound[0]->is_string()) throw RenderFailure("strip arg must be None or str");
    chars = bound[0]->as_string();
  }
  return Value::string(python_strip(soft_str(value), chars, true, true), is_markup(value));
}

Value filter_string(Renderer&, const Value& value, Arguments& args) {
  no_arguments("string", args);
  if (value.is_string()) return value;
  return Value::string(soft_str(value));
}

Value filter_safe(Renderer&, const Value& value, Arguments& args) {
  no_arguments("safe", args);
  return Value::string(soft_str(value), true);
}

Value filter_escape(Renderer& renderer, const Value& value, Arguments& args) {
  no_arguments("escape", args);
  if (value.is_string() && value.markup()) return value;
  return Value::string(text_result(renderer, html_escape(soft_str(value))).as_string(), true);
}

Value filter_forceescape(Renderer& renderer, const Value& value, Arguments& args) {
  no_arguments("forceescape", args);
  return Value::string(text_result(renderer, html_escape(soft_str(value))).as_string(), true);
}

Value filter_replace(Renderer& renderer, const Value& value, Arguments& args) {
  auto bound = bind_arguments("replace", args, {"old", "new", "count"}, 2);
  int64_t count = -1;
  if (bound[2] && !bound[2]->is_none()) {
    if (!bound[2]->is_integral()) throw RenderFailure("'" + type_name(*bound[2]) + "' object cannot be interpreted as an integer");
    count = bound[2]->as_int();
  }
  return text_result(renderer, python_replace(soft_str(value), soft_str(*bound[0]), soft_str(*bound[1]), count));
}

Value filter_center(Renderer& renderer, const Value& value, Arguments& args) {
  auto bound = bind_arguments("center", args, {"width"});
  Arguments method_args;
  method_args.positional.push_back(bound[0] ? *bound[0] : Value::integer(80));
  return renderer.call(get_attribute(Value::string(soft_str(value), is_markup(value)), "center"), method_args);
}

Value filter_indent(Renderer& renderer, const Value& value, Arguments& args) {
  auto bound = bind_arguments("indent", args, {"width", "first", "blank"});
  std::string indention(4, ' ');
  if (bound[0]) {
    if (bound[0]->is_string()) {
      // indention + line on a Markup line is Markup.__radd__: the indention is escaped.
      indention = is_markup(value) && !is_markup(*bound[0]) ? html_escape(bound[0]->as_string()) : bound[0]->as_string();
    } else if (bound[0]->is_integral()) {
      const int64_t width = bound[0]->as_int();
      if (width > (1 << 20)) throw RenderFailure("indent width too large");
      indention = std::string(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
    } else {
      throw RenderFailure("can't multiply sequence by non-int of type '" + type_name(*bound[0]) + "'");
    }
  }
  if (value.is_undefined()) throw_undefined(value);
  if (!value.is_string()) throw RenderFailure("unsupported operand type(s) for +=: '" + type_name(value) + "' and 'str'");
  const std::vector<std::string> lines = python_splitlines(value.as_string() + "\n", false);
  std::string out;
  if (bound[2] && truthy(*bound[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + indention;
      out += lines[i];
      renderer.charge_size(out.size());
    }
  } else {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + (lines[i].empty() ? std::string() : indention);
      out += lines[i];
      renderer.charge_size(out.size());
    }
  }
  if (bound[1] && truthy(*bound[1])) out = indention + out;
  return text_result(renderer, std::move(out), is_markup(value));
}

// jinja2 takes len() and slices of the value as given: a list within the length comes back
// unchanged (and a longer one fails, as list + str does).
Value filter_truncate(Renderer& renderer, const Value& value, Arguments& args) {
  auto bound = bind_arguments("truncate", args, {"length", "killwords", "end", "leeway"});
  const int64_t length = bound[0] ? (bound[0]->is_integral() ? bound[0]->as_int() : -1) : 255;
  const std::string end = bound[2] ? soft_str(*bound[2]) : "...";
  const int64_t leeway = bound[3] && !bound[3]->is_none() ? (bound[3]->is_integral() ? bound[3]->as_int() : -1) : 5;
  const auto end_length = static_cast<int64_t>(code_point_count(end));
  if (length < end_length) throw RenderFailure("expected length >= " + std::to_string(end_length) + ", got " + std::to_string(length));
  if (leeway < 0) throw RenderFailure("expected leeway >= 0, got " + std::to_string(leeway));
  if (static_cast<int64_t>(python_length(value)) <= length + leeway) return value;
  if (!value.is_string()) throw RenderFailure("can only concatenate " + type_name(value) + " (not \"str\") to " + type_name(value));
  const std::string& text = value.as_string();
  std::string kept = text.substr(0, byte_offset_of(text, static_cast<size_t>(length - end_length)));
  if (!(bound[1] && truthy(*bound[1]))) {
    const size_t space = kept.rfind(' ');
    if (space != std::string::npos) kept = kept.substr(0, space);
  }
  if (value.markup()) return text_result(renderer, kept + (bound[2] && is_markup(*bound[2]) ? end : html_escape(end)), true);
  return text_result(renderer, kept + end);
}

Value filter_wordcount(Renderer&, const Value& value, Arguments& args) {
  no_arguments("wordcount", args);
  int64_t words = 0;
  bool in_word = false;
  for (const char32_t c : decode_utf8(soft_str(value))) {
    std::string one;
    append_utf8(one, c);
    const bool word_char = c == '_' || python_is(CharClass::Alnum, one);
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::integer(words);
}

Value filter_format(Renderer& renderer, const Value& value, Arguments& args) {
  if (!args.positional.empty() && !args.keywords.empty()) {
    throw RenderFailure("can't handle positional and keyword arguments at the same time");
  }
  Value format_args;
  if (!args.keywords.empty()) {
    Dict mapping;
    for (const auto& [key, item] : args.keywords) mapping.set(Value::string(key), item);
    format_args = Value::dict(std::move(mapping));
  } else {
    format_args = Value::tuple(args.positional);
  }
  return text_result(renderer, python_percent_format(soft_str(value), format_args, is_markup(value)), is_markup(value));
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value filter_tojson(Renderer& renderer, const Value& value, Arguments& args) {
  auto bound = bind_arguments("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions options;
  options.ensure_ascii = bound[0] && truthy(*bound[0]);
  if (bound[1] && !bound[1]->is_none()) {
    if (bound[1]->is_string()) {
      options.indent = bound[1]->as_string();
    } else if (bound[1]->is_integral()) {
      options.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(bound[1]->as_int(), 0, 1 << 16)), ' ');
    } else {
      throw RenderFailure("can't multiply sequence by non-int of type '" + type_name(*bound[1]) + "'");
    }
  }
  if (bound[2] && !bound[2]->is_none()) {
    const ValueList parts = iterate(*bound[2]);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string()) {
      throw RenderFailure("tojson separators must be a pair of strings");
    }
    options.separators = std::make_pair(parts[0].as_string(), parts[1].as_string());
  }
  options.sort_keys = bound[3] && truthy(*bound[3]);
  return text_result(renderer, python_json_dumps(value, options));
}

Value filter_unsupported(Renderer&, const Value&, Arguments&) {
  throw RenderFailure("this jinja2 filter is not supported by this template engine");
}

}  // namespace

const std::vector<NamedFilter>& text_filters() {
  static const std::vector<NamedFilter> kFilters = {
      {"abs", filter_abs},
      {"capitalize", filter_capitalize},
      {"center", filter_center},
      {"e", filter_escape},
      {"escape", filter_escape},
      {"float", filter_float},
      {"forceescape", filter_forceescape},
      {"format", filter_format},
      {"indent", filter_indent},
      {"int", filter_int},
      {"lower", filter_lower},
      {"replace", filter_replace},
      {"round", filter_round},
      {"safe", filter_safe},
      {"string", filter_string},
      {"title", filter_title},
      {"tojson", filter_tojson},
      {"trim", filter_trim},
      {"truncate", filter_truncate},
      {"upper", filter_upper},
      {"wordcount", filter_wordcount},
      // jinja2 filters a chat template has no use for: known names (a template using one still
      // parses, as in jinja2), failing when applied.
      {"filesizeformat", filter_unsupported},
      {"pprint", filter_unsupported},
      {"random", filter_unsupported},
      {"striptags", filter_unsupported},
      {"urlencode", filter_unsupported},
      {"urlize", filter_unsupported},
      {"wordwrap", filter_unsupported},
      {"xmlattr", filter_unsupported},
  };
  return kFilters;
}

}  // namespace finetune::jinja
