#include "python_repr.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <vector>

#include "python_text.h"

namespace finetune::jinja {
namespace {

void append_hex_escape(std::string& out, char prefix, uint32_t code, int digits) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "\\%c%0*x", prefix, digits, code);
  out += buffer;
}

// Namespaces can contain themselves; like Python's dict repr, an object already being printed
// prints as {...}.
struct ReprState {
  std::vector<const Object*> active;
  int depth = 0;
};

void append_repr(std::string& out, const Value& value, ReprState& state);

void append_items(std::string& out, const ValueList& items, ReprState& state) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    append_repr(out, items[i], state);
  }
}

void append_dict(std::string& out, const Dict& dict, ReprState& state) {
  out += '{';
  bool first = true;
  for (const auto& [key, item] : dict.items()) {
    if (!first) out += ", ";
    first = false;
    append_repr(out, key, state);
    out += ": ";
    append_repr(out, item, state);
  }
  out += '}';
}

void append_repr(std::string& out, const Value& value, ReprState& state) {
  if (++state.depth > kMaxValueDepth) throw RenderFailure("value nested too deeply to print");
  switch (value.kind()) {
    case Value::Kind::Undefined: out += "Undefined"; break;
    case Value::Kind::String:
      if (value.markup()) {
        out += "Markup(" + python_string_repr(value.as_string()) + ")";
      } else {
        out += python_string_repr(value.as_string());
      }
      break;
    case Value::Kind::List:
      out += '[';
      append_items(out, value.as_list(), state);
      out += ']';
      break;
    case Value::Kind::Tuple:
      out += '(';
      append_items(out, value.as_list(), state);
      if (value.as_list().size() == 1) out += ',';
      out += ')';
      break;
    case Value::Kind::Dict: append_dict(out, value.as_dict(), state); break;
    case Value::Kind::Iterator: {
      const IteratorState& iterator = value.as_iterator();
      if (iterator.single_pass) {
        out += "<" + iterator.type_name + " object>";
        break;
      }
      out += iterator.type_name + "([";
      append_items(out, iterator.items, state);
      out += "])";
      break;
    }
    case Value::Kind::Object: {
      const auto* ns = dynamic_cast<const Namespace*>(&value.as_object());
      if (ns == nullptr) {
        out += value.as_object().repr();
        break;
      }
      out += "<Namespace ";
      if (std::find(state.active.begin(), state.active.end(), ns) != state.active.end()) {
        out += "{...}";
      } else {
        state.active.push_back(ns);
        append_dict(out, ns->attributes(), state);
        state.active.pop_back();
      }
      out += '>';
      break;
    }
    default: out += python_str(value); break;
  }
  --state.depth;
}

}  // namespace

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::string out = std::signbit(value) ? "-" : "";
  // Shortest round-trip digits, then Python's layout: fixed notation when the decimal point falls
  // within -4 < decpt <= 16, else d.ddde+XX.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), std::fabs(value), std::chars_format::scientific);
  const std::string scientific(buffer, result.ptr);
  const size_t e = scientific.find('e');
  std::string digits = scientific.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(scientific.substr(e + 1));
  const int decpt = exponent + 1;
  const int ndigits = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= ndigits) {
      out += digits + std::string(static_cast<size_t>(decpt - ndigits), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (ndigits > 1) out += "." + digits.substr(1);
  char exp_text[16];
  std::snprintf(exp_text, sizeof(exp_text), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_text;
}

std::string python_string_repr(const std::string& text) {
  const bool has_single = text.find('\'') != std::string::npos;
  const bool has_double = text.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char32_t c : decode_utf8(text)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      append_hex_escape(out, 'x', c, 2);
    } else if (c < 0x7F) {
      out += static_cast<char>(c);
    } else if (is_python_printable(c)) {
      append_utf8(out, c);
    } else if (c <= 0xFF) {
      append_hex_escape(out, 'x', c, 2);
    } else if (c <= 0xFFFF) {
      append_hex_escape(out, 'u', c, 4);
    } else {
      append_hex_escape(out, 'U', c, 8);
    }
  }
  out += quote;
  return out;
}

std::string python_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return value.as_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(value.as_int());
    case Value::Kind::Float: return python_float_repr(value.as_double());
    case Value::Kind::String: return value.as_string();
    default: return python_repr(value);
  }
}

std::string python_repr(const Value& value) {
  if (value.is_string() || value.kind() >= Value::Kind::List) {
    std::string out;
    ReprState state;
    append_repr(out, value, state);
    return out;
  }
  if (value.is_undefined()) return "Undefined";
  return python_str(value);
}

}  // namespace finetune::jinja
