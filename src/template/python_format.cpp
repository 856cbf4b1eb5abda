#include "python_format.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "builtins.h"
#include "python_repr.h"
#include "python_text.h"

namespace finetune::jinja {
namespace {

// Pads `text` to `width` code points: left-justified, right-justified or centred.
std::string pad(const std::string& text, size_t width, char align, const std::string& fill) {
  const size_t length = code_point_count(text);
  if (length >= width) return text;
  const size_t missing = width - length;
  auto repeat = [&](size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out += fill;
    return out;
  };
  if (align == '<') return text + repeat(missing);
  if (align == '^') return repeat(missing / 2) + text + repeat(missing - missing / 2);
  return repeat(missing) + text;
}

std::string truncate_code_points(const std::string& text, size_t count) {
  return text.substr(0, byte_offset_of(text, count));
}

int64_t integer_of(const Value& value, char type) {
  if (value.is_integral()) return value.as_int();
  if (value.is_float() && (type == 'd' || type == 'i' || type == 'u')) {
    const double v = value.as_double();
    if (!std::isfinite(v)) throw RenderFailure("cannot convert float " + python_float_repr(v) + " to integer");
    if (std::fabs(v) >= 9.2e18) throw RenderFailure("integer does not fit in 64 bits");
    return static_cast<int64_t>(v);
  }
  if (value.is_undefined()) throw_undefined(value);
  const char* need = (type == 'd' || type == 'i' || type == 'u') ? "a real number" : "an integer";
  throw RenderFailure(std::string("%") + type + " format: " + need + " is required, not " + type_name(value));
}

double float_of(const Value& value) {
  if (value.is_number()) return value.as_double();
  if (value.is_undefined()) throw_undefined(value);
  throw RenderFailure("must be real number, not " + type_name(value));
}

std::string printf_number(const std::string& spec, int64_t value) {
  char buffer[128];
  std::snprintf(buffer, sizeof(buffer), (spec.substr(0, spec.size() - 1) + "ll" + spec.back()).c_str(),
                static_cast<long long>(value));
  return buffer;
}

std::string printf_double(const std::string& spec, double value) {
  char buffer[512];
  const int n = std::snprintf(buffer, sizeof(buffer), spec.c_str(), value);
  if (n < 0 || static_cast<size_t>(n) >= sizeof(buffer)) throw RenderFailure("formatted number too long");
  return buffer;
}

std::string char_of(const Value& value) {
  if (value.is_string()) {
    if (code_point_count(value.as_string()) != 1) throw RenderFailure("%c requires int or char");
    return value.as_string();
  }
  if (!value.is_integral()) throw RenderFailure("%c requires int or char");
  const int64_t code = value.as_int();
  if (code < 0 || code > 0x10FFFF) throw RenderFailure("%c arg not in range(0x110000)");
  std::string out;
  append_utf8(out, static_cast<char32_t>(code));
  return out;
}

// Widths and precisions past this are a template error, not a gigabyte string (literal or '*').
constexpr int64_t kMaxFieldNumber = 100000;

int64_t checked_field_number(int64_t number, const char* what) {
  if (number > kMaxFieldNumber || number < -kMaxFieldNumber) {
    throw RenderFailure(std::string(what) + " too big: " + std::to_string(number) + " (at most " +
                        std::to_string(kMaxFieldNumber) + ")");
  }
  return number;
}

// The width or precision at format[i]: '*' takes the next argument, else decimal digits (none:
// nullopt). Either way bounded by checked_field_number; `i` moves past it.
template <class Take>
std::optional<int64_t> field_number(const std::string& format, size_t& i, Take& take, const char* what) {
  if (i < format.size() && format[i] == '*') {
    ++i;
    return checked_field_number(integer_of(take(), 'd'), what);
  }
  std::optional<int64_t> number;
  while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) {
    number = checked_field_number(number.value_or(0) * 10 + (format[i++] - '0'), what);
  }
  return number;
}

}  // namespace

std::string python_percent_format(const std::string& format, const Value& args, bool escape_values) {
  ValueList positional;
  const Dict* mapping = nullptr;
  if (args.is_tuple()) {
    positional = args.as_list();
  } else {
    positional.push_back(args);
    if (args.is_dict()) mapping = &args.as_dict();
  }
  size_t next_arg = 0;
  bool used_mapping = false;
  auto take = [&]() -> const Value& {
    if (next_arg >= positional.size()) throw RenderFailure("not enough arguments for format string");
    return positional[next_arg++];
  };
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) throw RenderFailure("incomplete format");
    std::optional<Value> keyed;
    if (format[i] == '(') {
      if (mapping == nullptr) throw RenderFailure("format requires a mapping");
      int depth = 1;
      const size_t start = ++i;
      while (i < format.size() && depth > 0) {
        depth += format[i] == '(' ? 1 : (format[i] == ')' ? -1 : 0);
        ++i;
      }
      if (depth > 0) throw RenderFailure("incomplete format key");
      const std::string key = format.substr(start, i - 1 - start);
      const Value* found = mapping->find(key);
      if (found == nullptr) throw RenderFailure("KeyError: " + python_string_repr(key));
      keyed = *found;
      used_mapping = true;
    }
    std::string flags;
    while (i < format.size() && std::string("-+ #0").find(format[i]) != std::string::npos) flags += format[i++];
    std::optional<int64_t> width = field_number(format, i, take, "width");
    if (width && *width < 0) {  // Python: a negative '*' width left-justifies
      flags += '-';
      width = -*width;
    }
    std::optional<int64_t> precision;
    if (i < format.size() && format[i] == '.') {
      ++i;
      precision = std::max<int64_t>(field_number(format, i, take, "precision").value_or(0), 0);
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) throw RenderFailure("incomplete format");
    const char type = format[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    const Value value = keyed ? *keyed : take();
    const bool left = flags.find('-') != std::string::npos;
    const size_t field_width = width ? static_cast<size_t>(std::max<int64_t>(*width, 0)) : 0;
    std::string numeric_spec = "%" + flags + (width ? std::to_string(std::max<int64_t>(*width, 0)) : "");
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        std::string text = type == 's' ? python_str(value) : python_repr(value);
        if (escape_values && !(value.is_string() && value.markup())) text = html_escape(text);
        if (precision) text = truncate_code_points(text, static_cast<size_t>(std::max<int64_t>(*precision, 0)));
        out += pad(text, field_width, left ? '<' : '>', " ");
        break;
      }
      case 'c': out += pad(char_of(value), field_width, left ? '<' : '>', " "); break;
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        if (precision) numeric_spec += "." + std::to_string(*precision);
        const char c = type == 'i' || type == 'u' ? 'd' : type;
        std::string text = printf_number(numeric_spec + c, integer_of(value, type));
        if (type == 'o' && flags.find('#') != std::string::npos) {
          // C writes 017, Python 0o17.
          const size_t zero = text.find('0');
          if (zero != std::string::npos) text.insert(zero + 1, "o");
        }
        out += text;
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G':
        numeric_spec += "." + std::to_string(precision.value_or(6));
        out += printf_double(numeric_spec + type, float_of(value));
        break;
      default:
        throw RenderFailure(std::string("unsupported format character '") + type + "'");
    }
  }
  // Python skips this check when the argument is a mapping-like object (dict, list, ...).
  const bool mapping_like = args.is_dict() || args.is_list() || args.is_undefined();
  if (!used_mapping && !mapping_like && next_arg < positional.size()) {
    throw RenderFailure("not all arguments converted during string formatting");
  }
  return out;
}

namespace {

struct FormatSpec {
  std::string fill = " ";
  char align = '\0';
  char sign = '-';
  bool alternate = false;
  size_t width = 0;
  char grouping = '\0';
  std::optional<size_t> precision;
  char type = '\0';
};

FormatSpec parse_spec(const std::string& spec) {
  FormatSpec out;
  const std::vector<char32_t> cps = decode_utf8(spec);
  size_t i = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (cps.size() >= 2 && is_align(cps[1])) {
    out.fill.clear();
    append_utf8(out.fill, cps[0]);
    out.align = static_cast<char>(cps[1]);
    i = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    out.align = static_cast<char>(cps[0]);
    i = 1;
  }
  if (i < cps.size() && (cps[i] == '+' || cps[i] == '-' || cps[i] == ' ')) out.sign = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == '#') {
    out.alternate = true;
    ++i;
  }
  if (i < cps.size() && cps[i] == '0') {
    if (out.align == '\0') {
      out.fill = "0";
      out.align = '=';
    }
    ++i;
  }
  while (i < cps.size() && cps[i] >= '0' && cps[i] <= '9') {
    out.width = out.width * 10 + (cps[i++] - '0');
    if (out.width > 100000) throw RenderFailure("Too many decimal digits in format string");
  }
  if (i < cps.size() && (cps[i] == ',' || cps[i] == '_')) out.grouping = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == '.') {
    ++i;
    size_t precision = 0;
    if (i >= cps.size() || cps[i] < '0' || cps[i] > '9') throw RenderFailure("Format specifier missing precision");
    while (i < cps.size() && cps[i] >= '0' && cps[i] <= '9') {
      precision = precision * 10 + (cps[i++] - '0');
      if (precision > 100000) throw RenderFailure("Too many decimal digits in format string");
    }
    out.precision = precision;
  }
  if (i < cps.size()) out.type = static_cast<char>(cps[i++]);
  if (i != cps.size()) throw RenderFailure("Invalid format specifier");
  return out;
}

std::string group_digits(const std::string& digits, char separator) {
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) out += separator;
    out += digits[i];
  }
  return out;
}

// Sign and digits laid out with the spec's width: '=' pads between them.
std::string layout_number(const std::string& sign, const std::string& body, const FormatSpec& spec) {
  const char align = spec.align == '\0' ? '>' : spec.align;
  if (align == '=') {
    const size_t used = sign.size() + code_point_count(body);
    std::string padding;
    for (size_t i = used; i < spec.width; ++i) padding += spec.fill;
    return sign + padding + body;
  }
  return pad(sign + body, spec.width, align, spec.fill);
}

std::string format_value(const Value& value, const std::string& spec_text) {
  if (spec_text.empty()) return python_str(value);
  const FormatSpec spec = parse_spec(spec_text);
  if (value.is_string() || value.is_undefined()) {
    if (spec.type != '\0' && spec.type != 's') {
      throw RenderFailure(std::string("Unknown format code '") + spec.type + "' for object of type 'str'");
    }
    std::string text = python_str(value);
    if (spec.precision) text = truncate_code_points(text, *spec.precision);
    return pad(text, spec.width, spec.align == '\0' ? '<' : spec.align, spec.fill);
  }
  if (!value.is_number()) throw RenderFailure("unsupported format string passed to " + type_name(value) + ".__format__");
  const bool integer_type = spec.type == '\0' || std::string("dbcoxXn").find(spec.type) != std::string::npos;
  if (value.is_integral() && integer_type) {
    const int64_t v = value.as_int();
    const uint64_t magnitude = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    std::string digits;
    std::string prefix;
    switch (spec.type) {
      case 'b':
        for (uint64_t m = magnitude; m > 0 || digits.empty(); m >>= 1) digits.insert(digits.begin(), char('0' + (m & 1)));
        prefix = "0b";
        break;
      case 'o': digits = printf_number("%o", static_cast<int64_t>(magnitude)); prefix = "0o"; break;
      case 'x': digits = printf_number("%x", static_cast<int64_t>(magnitude)); prefix = "0x"; break;
      case 'X': digits = printf_number("%X", static_cast<int64_t>(magnitude)); prefix = "0X"; break;
      case 'c': return pad(char_of(value), spec.width, spec.align == '\0' ? '<' : spec.align, spec.fill);
      default: digits = std::to_string(magnitude); break;
    }
    if (spec.grouping) digits = group_digits(digits, spec.grouping);
    std::string sign = v < 0 ? "-" : (spec.sign == '+' ? "+" : (spec.sign == ' ' ? " " : ""));
    if (spec.alternate) sign += prefix;
    return layout_number(sign, digits, spec);
  }
  const double v = value.as_double();
  char type = spec.type;
  std::string body;
  if (type == '\0' && !spec.precision) {
    body = value.is_integral() ? std::to_string(value.as_int()) : python_float_repr(std::fabs(v));
    if (value.is_integral() && v < 0) body = body.substr(1);
  } else {
    if (std::string("eEfFgG%").find(type == '\0' ? 'g' : type) == std::string::npos) {
      throw RenderFailure(std::string("Unknown format code '") + type + "' for object of type '" + type_name(value) + "'");
    }
    const size_t precision = spec.precision.value_or(6);
    const double magnitude = type == '%' ? std::fabs(v) * 100 : std::fabs(v);
    const char c = type == '%' ? 'f' : (type == '\0' ? 'g' : type);
    body = printf_double("%" + std::string(spec.alternate ? "#" : "") + "." + std::to_string(precision) + c, magnitude);
    if (type == '%') body += '%';
    if (spec.grouping) {
      const size_t end = body.find_first_not_of("0123456789");
      body = group_digits(body.substr(0, end), spec.grouping) + (end == std::string::npos ? "" : body.substr(end));
    }
  }
  const std::string sign = std::signbit(v) && !std::isnan(v) ? "-" : (spec.sign == '+' ? "+" : (spec.sign == ' ' ? " " : ""));
  return layout_number(sign, body, spec);
}

const Value& keyword_argument(const Arguments& args, const std::string& name) {
  for (const auto& [key, value] : args.keywords) {
    if (key == name) return value;
  }
  throw RenderFailure("KeyError: " + python_string_repr(name));
}

}  // namespace

std::string python_str_format(const std::string& format, const Arguments& args, bool escape_values) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      throw RenderFailure("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = format.find('}', i + 1);
    if (close == std::string::npos) throw RenderFailure("Single '{' encountered in format string");
    const std::string field = format.substr(i + 1, close - i - 1);
    if (field.find('{') != std::string::npos) throw RenderFailure("nested format fields are not supported");
    i = close;
    std::string name = field;
    std::string spec;
    char conversion = '\0';
    const size_t colon = name.find(':');
    if (colon != std::string::npos) {
      spec = name.substr(colon + 1);
      name = name.substr(0, colon);
    }
    const size_t bang = name.find('!');
    if (bang != std::string::npos) {
      if (bang + 2 != name.size()) throw RenderFailure("expected ':' after conversion specifier");
      conversion = name[bang + 1];
      name = name.substr(0, bang);
    }
    const size_t accessor = name.find_first_of(".[");
    const std::string head = name.substr(0, accessor);
    Value value;
    if (head.empty()) {
      if (auto_index >= args.positional.size()) throw RenderFailure("Replacement index " + std::to_string(auto_index) + " out of range for positional args tuple");
      value = args.positional[auto_index++];
    } else if (std::all_of(head.begin(), head.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
      const size_t index = std::stoul(head);
      if (index >= args.positional.size()) throw RenderFailure("Replacement index " + head + " out of range for positional args tuple");
      value = args.positional[index];
    } else {
      value = keyword_argument(args, head);
    }
    for (size_t p = accessor; p != std::string::npos && p < name.size();) {
      if (name[p] == '.') {
        const size_t end = name.find_first_of(".[", p + 1);
        value = get_attribute(value, name.substr(p + 1, end == std::string::npos ? std::string::npos : end - p - 1));
        p = end;
      } else {
        const size_t end = name.find(']', p);
        if (end == std::string::npos) throw RenderFailure("Missing ']' in format string");
        const std::string key = name.substr(p + 1, end - p - 1);
        const bool numeric = !key.empty() && std::all_of(key.begin(), key.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); });
        value = get_item(value, numeric ? Value::integer(std::stoll(key)) : Value::string(key));
        p = end + 1;
      }
    }
    if (conversion == 'r' || conversion == 'a') {
      value = Value::string(python_repr(value));
    } else if (conversion == 's') {
      value = Value::string(python_str(value));
    } else if (conversion != '\0') {
      throw RenderFailure(std::string("Unknown conversion specifier ") + conversion);
    }
    const std::string formatted = format_value(value, spec);
    out += escape_values && !(value.is_string() && value.markup()) ? html_escape(formatted) : formatted;
  }
  return out;
}

}  // namespace finetune::jinja
