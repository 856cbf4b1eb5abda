// json.dumps as transformers' tojson filter calls it (the Python json module's encoder rules).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "python_repr.h"
#include "python_text.h"

namespace finetune::jinja {
namespace {

void append_json_string(std::string& out, const std::string& text, bool ensure_ascii) {
  out += '"';
  for (const char32_t c : decode_utf8(text)) {
    char buffer[16];
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c > 0xFFFF) {  // a surrogate pair, as json.dumps writes astral characters
        const char32_t v = c - 0x10000;
        std::snprintf(buffer, sizeof(buffer), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buffer, sizeof(buffer), "\\u%04x", static_cast<unsigned>(c));
      }
      out += buffer;
    } else {
      append_utf8(out, c);
    }
  }
  out += '"';
}

std::string float_json(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return python_float_repr(value);
}

[[noreturn]] void throw_not_serializable(const Value& value) {
  throw RenderFailure("Object of type " + type_name(value) + " is not JSON serializable");
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& options) : options_(options) {
    if (options.separators) {
      item_separator_ = options.separators->first;
      key_separator_ = options.separators->second;
    } else {
      item_separator_ = options.indent ? "," : ", ";
      key_separator_ = ": ";
    }
  }

  void write(std::string& out, const Value& value, int level) {
    switch (value.kind()) {
      case Value::Kind::None: out += "null"; return;
      case Value::Kind::Bool: out += value.as_bool() ? "true" : "false"; return;
      case Value::Kind::Int: out += std::to_string(value.as_int()); return;
      case Value::Kind::Float: out += float_json(value.as_double()); return;
      case Value::Kind::String: append_json_string(out, value.as_string(), options_.ensure_ascii); return;
      case Value::Kind::List:
      case Value::Kind::Tuple: write_list(out, value.as_list(), level); return;
      case Value::Kind::Dict: write_dict(out, value.as_dict(), level); return;
      default: throw_not_serializable(value);
    }
  }

 private:
  void newline(std::string& out, int level) const {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *options_.indent;
  }

  void write_list(std::string& out, const ValueList& items, int level) {
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += item_separator_;
      if (options_.indent) newline(out, level + 1);
      write(out, items[i], level + 1);
    }
    if (options_.indent) newline(out, level);
    out += ']';
  }

  // Keys: str as is; int, float, bool and None converted as json.dumps does; others fail.
  std::string key_text(const Value& key) const {
    switch (key.kind()) {
      case Value::Kind::String: return key.as_string();
      case Value::Kind::None: return "null";
      case Value::Kind::Bool: return key.as_bool() ? "true" : "false";
      case Value::Kind::Int: return std::to_string(key.as_int());
      case Value::Kind::Float: return float_json(key.as_double());
      default: break;
    }
    throw RenderFailure("keys must be str, int, float, bool or None, not " + type_name(key));
  }

  void write_dict(std::string& out, const Dict& dict, int level) {
    if (dict.empty()) {
      out += "{}";
      return;
    }
    std::vector<const Dict::Item*> items;
    for (const Dict::Item& item : dict.items()) items.push_back(&item);
    if (options_.sort_keys) {
      std::stable_sort(items.begin(), items.end(), [](const Dict::Item* a, const Dict::Item* b) {
        return python_compare(a->first, b->first) < 0;
      });
    }
    out += '{';
    bool first = true;
    for (const Dict::Item* item : items) {
      if (!first) out += item_separator_;
      first = false;
      if (options_.indent) newline(out, level + 1);
      append_json_string(out, key_text(item->first), options_.ensure_ascii);
      out += key_separator_;
      write(out, item->second, level + 1);
    }
    if (options_.indent) newline(out, level);
    out += '}';
  }

  const JsonDumpOptions& options_;
  std::string item_separator_;
  std::string key_separator_;
};

}  // namespace

std::string python_json_dumps(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  JsonWriter(options).write(out, value, 0);
  return out;
}

}  // namespace finetune::jinja
