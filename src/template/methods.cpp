#include "methods.h"

#include <algorithm>
#include <unordered_set>

#include "builtins.h"
#include "python_format.h"
#include "python_repr.h"
#include "python_text.h"
#include "renderer.h"

namespace finetune::jinja {
namespace {

const std::unordered_set<std::string> kStrMethods = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower",
    "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans",
    "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
    "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};
const std::unordered_set<std::string> kDictMethods = {"clear", "copy", "fromkeys", "get", "items", "keys",
                                                      "pop", "popitem", "setdefault", "update", "values"};
const std::unordered_set<std::string> kListMethods = {"append", "clear", "copy", "count", "extend", "index",
                                                      "insert", "pop", "remove", "reverse", "sort"};
const std::unordered_set<std::string> kTupleMethods = {"count", "index"};
// What jinja2's sandbox calls modifying a known mutable type.
const std::unordered_set<std::string> kUnsafe = {"clear", "pop", "popitem", "setdefault", "update", "append",
                                                 "extend", "insert", "remove", "reverse", "sort"};

const std::unordered_set<std::string>* methods_of(const Value& receiver) {
  switch (receiver.kind()) {
    case Value::Kind::String: return &kStrMethods;
    case Value::Kind::Dict: return &kDictMethods;
    case Value::Kind::List: return &kListMethods;
    case Value::Kind::Tuple: return &kTupleMethods;
    default: return nullptr;
  }
}

std::string string_argument(const std::string& method, const std::optional<Value>& value, const char* what) {
  if (!value || !value->is_string()) {
    throw RenderFailure(method + "() argument must be str" + std::string(what) + ", not " +
                        (value ? type_name(*value) : std::string("nothing")));
  }
  return value->as_string();
}

std::optional<std::string> optional_string(const std::string& method, const std::optional<Value>& value) {
  if (!value || value->is_none()) return std::nullopt;
  return string_argument(method, value, " or None");
}

std::optional<int64_t> optional_index(const std::optional<Value>& value) {
  if (!value || value->is_none()) return std::nullopt;
  if (!value->is_integral()) {
    throw RenderFailure("slice indices must be integers or None or have an __index__ method");
  }
  return value->as_int();
}

int64_t integer_argument(const std::string& method, const std::optional<Value>& value, int64_t fallback) {
  if (!value) return fallback;
  if (!value->is_integral()) {
    throw RenderFailure("'" + type_name(*value) + "' object cannot be interpreted as an integer (in " + method + ")");
  }
  return value->as_int();
}

void no_keywords(const std::string& method, const Arguments& args) {
  if (!args.keywords.empty()) throw RenderFailure(method + "() takes no keyword arguments");
}

Value string_list(const std::vector<std::string>& pieces) {
  ValueList items;
  items.reserve(pieces.size());
  for (const std::string& piece : pieces) items.push_back(Value::string(piece));
  return Value::list(std::move(items));
}

// str.center / ljust / rjust.
Value justify(const std::string& method, const std::string& text, Arguments& args) {
  no_keywords(method, args);
  auto bound = bind_arguments(method, args, {"width", "fillchar"}, 1);
  const int64_t width = integer_argument(method, bound[0], 0);
  const std::string fill = bound[1] ? string_argument(method, bound[1], "") : " ";
  if (code_point_count(fill) != 1) throw RenderFailure("The fill character must be exactly one character long");
  const int64_t length = static_cast<int64_t>(code_point_count(text));
  if (width <= length) return Value::string(text);
  if (width > (1 << 24)) throw RenderFailure(method + "() width too large");
  const int64_t margin = width - length;
  int64_t left = 0;
  if (method == "rjust") {
    left = margin;
  } else if (method == "center") {
    left = margin / 2 + (margin & width & 1);
  }
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += text;
  for (int64_t i = left; i < margin; ++i) out += fill;
  return Value::string(std::move(out));
}

Value call_str_method(Renderer& renderer, const std::string& text, const std::string& name, Arguments& args,
                      bool markup) {
  const std::string method = "str." + name;
  if (name == "split" || name == "rsplit") {
    auto bound = bind_arguments(name, args, {"sep", "maxsplit"});
    const std::optional<std::string> sep = optional_string(name, bound[0]);
    if (sep && sep->empty()) throw RenderFailure("empty separator");
    renderer.charge_size(text.size());
    return string_list(python_split(text, sep, integer_argument(name, bound[1], -1), name == "rsplit"));
  }
  if (name == "splitlines") {
    auto bound = bind_arguments(name, args, {"keepends"});
    renderer.charge_size(text.size());
    return string_list(python_splitlines(text, bound[0] && truthy(*bound[0])));
  }
  if (name == "format") {
    std::string out = python_str_format(text, args, markup);
    renderer.charge_size(out.size());
    return Value::string(std::move(out));
  }
  no_keywords(name, args);
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto bound = bind_arguments(name, args, {"chars"});
    return Value::string(python_strip(text, optional_string(name, bound[0]), name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    auto bound = bind_arguments(name, args, {"prefix", "start", "end"}, 1);
    std::vector<std::string> candidates;
    if (bound[0]->is_tuple()) {
      for (const Value& item : bound[0]->as_list()) candidates.push_back(string_argument(name, item, ""));
    } else if (bound[0]->is_string()) {
      candidates.push_back(bound[0]->as_string());
    } else {
      throw RenderFailure(name + " first arg must be str or a tuple of str, not " + type_name(*bound[0]));
    }
    const size_t length = code_point_count(text);
    std::optional<int64_t> start = optional_index(bound[1]);
    std::optional<int64_t> end = optional_index(bound[2]);
    auto clamp = [&](std::optional<int64_t> index, size_t fallback) {
      if (!index) return fallback;
      int64_t v = *index < 0 ? *index + static_cast<int64_t>(length) : *index;
      return static_cast<size_t>(std::clamp<int64_t>(v, 0, static_cast<int64_t>(length)));
    };
    const size_t first = clamp(start, 0);
    const size_t last = clamp(end, length);
    if (first > last) return Value::boolean(false);
    const size_t begin_byte = byte_offset_of(text, first);
    const std::string window = text.substr(begin_byte, byte_offset_of(text, last) - begin_byte);
    for (const std::string& candidate : candidates) {
      if (candidate.size() > window.size()) continue;
      const bool match = name == "startswith" ? window.compare(0, candidate.size(), candidate) == 0
                                              : window.compare(window.size() - candidate.size(), candidate.size(), candidate) == 0;
      if (match) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "replace") {
    auto bound = bind_arguments(name, args, {"old", "new", "count"}, 2);
    std::string out = python_replace(text, string_argument(name, bound[0], ""), string_argument(name, bound[1], ""),
                                     integer_argument(name, bound[2], -1));
    renderer.charge_size(out.size());
    return Value::string(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    auto bound = bind_arguments(name, args, {"sub", "start", "end"}, 1);
    const std::string& sub = string_argument(name, bound[0], "");
    if (name == "count") return Value::integer(python_count(text, sub, optional_index(bound[1]), optional_index(bound[2])));
    const int64_t found = python_find(text, sub, optional_index(bound[1]), optional_index(bound[2]),
                                      name == "rfind" || name == "rindex");
    if (found < 0 && (name == "index" || name == "rindex")) throw RenderFailure("substring not found");
    return Value::integer(found);
  }
  if (name == "join") {
    auto bound = bind_arguments(name, args, {"iterable"}, 1);
    const ValueList items = iterate(*bound[0]);
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string() && !markup) {
        throw RenderFailure("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(items[i]) +
                            " found");
      }
      if (i > 0) out += text;
      // Markup.join escapes every item that is not Markup (any value: escape() takes str() first).
      const bool escape = markup && !(items[i].is_string() && items[i].markup());
      out += escape ? html_escape(python_str(items[i])) : items[i].as_string();
      renderer.charge_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "partition" || name == "rpartition") {
    auto bound = bind_arguments(name, args, {"sep"}, 1);
    const std::string& sep = string_argument(name, bound[0], "");
    if (sep.empty()) throw RenderFailure("empty separator");
    const size_t found = name == "partition" ? text.find(sep) : text.rfind(sep);
    if (found == std::string::npos) {
      return name == "partition" ? Value::tuple({Value::string(text), Value::string(""), Value::string("")})
                                 : Value::tuple({Value::string(""), Value::string(""), Value::string(text)});
    }
    return Value::tuple({Value::string(text.substr(0, found)), Value::string(sep),
                         Value::string(text.substr(found + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    auto bound = bind_arguments(name, args, {"affix"}, 1);
    const std::string& affix = string_argument(name, bound[0], "");
    if (affix.size() <= text.size()) {
      if (name == "removeprefix" && text.compare(0, affix.size(), affix) == 0) return Value::string(text.substr(affix.size()));
      if (name == "removesuffix" && text.compare(text.size() - affix.size(), affix.size(), affix) == 0) {
        return Value::string(text.substr(0, text.size() - affix.size()));
      }
    }
    return Value::string(text);
  }
  if (name == "center" || name == "ljust" || name == "rjust") return justify(name, text, args);
  if (name == "zfill") {
    auto bound = bind_arguments(name, args, {"width"}, 1);
    const int64_t width = integer_argument(name, bound[0], 0);
    const int64_t length = static_cast<int64_t>(code_point_count(text));
    if (width <= length) return Value::string(text);
    if (width > (1 << 24)) throw RenderFailure("zfill() width too large");
    const bool sign = !text.empty() && (text[0] == '+' || text[0] == '-');
    return Value::string((sign ? text.substr(0, 1) : "") + std::string(static_cast<size_t>(width - length), '0') +
                         text.substr(sign ? 1 : 0));
  }
  bind_arguments(name, args, {});
  if (name == "upper") return Value::string(python_upper(text));
  if (name == "lower") return Value::string(python_lower(text));
  if (name == "title") return Value::string(python_title(text));
  if (name == "capitalize") return Value::string(python_capitalize(text));
  if (name == "swapcase") return Value::string(python_swapcase(text));
  if (name == "isalnum") return Value::boolean(python_is(CharClass::Alnum, text));
  if (name == "isalpha") return Value::boolean(python_is(CharClass::Alpha, text));
  if (name == "isdecimal") return Value::boolean(python_is(CharClass::Decimal, text));
  if (name == "isdigit") return Value::boolean(python_is(CharClass::Digit, text));
  if (name == "isnumeric") return Value::boolean(python_is(CharClass::Numeric, text));
  if (name == "isspace") return Value::boolean(python_is(CharClass::Space, text));
  if (name == "islower") return Value::boolean(python_is(CharClass::Lower, text));
  if (name == "isupper") return Value::boolean(python_is(CharClass::Upper, text));
  if (name == "istitle") return Value::boolean(python_is(CharClass::Title, text));
  if (name == "isascii") {
    return Value::boolean(std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
  }
  throw RenderFailure(method + "() is not supported by this template engine");
}

Value dict_view(const Dict& dict, const std::string& name) {
  auto state = std::make_shared<IteratorState>();
  state->type_name = "dict_" + name;
  state->single_pass = false;
  for (const auto& [key, value] : dict.items()) {
    if (name == "keys") {
      state->items.push_back(key);
    } else if (name == "values") {
      state->items.push_back(value);
    } else {
      state->items.push_back(Value::tuple({key, value}));
    }
  }
  return Value::iterator(std::move(state));
}

Value call_dict_method(const Value& receiver, const std::string& name, Arguments& args) {
  no_keywords(name, args);
  const Dict& dict = receiver.as_dict();
  if (name == "get") {
    auto bound = bind_arguments(name, args, {"key", "default"}, 1);
    const Value* found = dict.find(*bound[0]);
    if (found != nullptr) return *found;
    return bound[1] ? *bound[1] : Value::none();
  }
  bind_arguments(name, args, {});
  if (name == "keys" || name == "values" || name == "items") return dict_view(dict, name);
  if (name == "copy") return receiver;
  throw RenderFailure("dict." + name + "() is not supported by this template engine");
}

Value call_sequence_method(const Value& receiver, const std::string& name, Arguments& args) {
  no_keywords(name, args);
  const ValueList& items = receiver.as_list();
  if (name == "copy") {
    bind_arguments(name, args, {});
    return receiver;
  }
  if (name == "count") {
    auto bound = bind_arguments(name, args, {"value"}, 1);
    return Value::integer(std::count_if(items.begin(), items.end(), [&](const Value& v) { return python_equal(v, *bound[0]); }));
  }
  auto bound = bind_arguments(name, args, {"value", "start", "stop"}, 1);  // index
  const auto length = static_cast<int64_t>(items.size());
  auto clamp = [&](const std::optional<Value>& index, int64_t fallback) {
    if (!index) return fallback;
    if (!index->is_integral()) throw RenderFailure("slice indices must be integers or have an __index__ method");
    const int64_t v = index->as_int() < 0 ? index->as_int() + length : index->as_int();
    return std::clamp<int64_t>(v, 0, length);
  };
  for (int64_t i = clamp(bound[1], 0); i < clamp(bound[2], length); ++i) {
    if (python_equal(items[static_cast<size_t>(i)], *bound[0])) return Value::integer(i);
  }
  throw RenderFailure(python_repr(*bound[0]) + " is not in " + type_name(receiver));
}

// markupsafe's Markup: the string methods it wraps return Markup (lists and tuples of Markup for
// split and partition); replace escapes the new text, ljust/rjust/center the fill character.
const std::unordered_set<std::string> kMarkupMethods = {
    "capitalize", "title", "lower", "upper", "replace", "ljust", "rjust", "lstrip", "rstrip", "center", "strip",
    "swapcase", "zfill", "casefold", "removeprefix", "removesuffix", "partition", "rpartition", "split", "rsplit",
    "splitlines", "join", "format"};

Value as_markup(const Value& value) {
  if (value.is_string()) return Value::string(value.as_string(), true);
  if (!value.is_sequence()) return value;
  ValueList items;
  for (const Value& item : value.as_list()) items.push_back(as_markup(item));
  return value.is_list() ? Value::list(std::move(items)) : Value::tuple(std::move(items));
}

Value call_markup_method(Renderer& renderer, const std::string& text, const std::string& name, Arguments& args) {
  auto escape_argument = [&](size_t index) {
    if (index < args.positional.size() && args.positional[index].is_string() && !args.positional[index].markup()) {
      args.positional[index] = Value::string(html_escape(args.positional[index].as_string()), true);
    }
  };
  if (name == "replace") escape_argument(1);
  if (name == "ljust" || name == "rjust" || name == "center") escape_argument(1);
  const Value result = call_str_method(renderer, text, name, args, true);
  return kMarkupMethods.count(name) != 0 ? as_markup(result) : result;
}

class BoundMethod : public Object {
 public:
  BoundMethod(Value receiver, std::string name) : receiver_(std::move(receiver)), name_(std::move(name)) {}

  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override {
    return "<built-in method " + name_ + " of " + finetune::jinja::type_name(receiver_) + " object>";
  }
  bool callable() const override { return true; }
  int depth() const override { return receiver_.depth() + 1; }

  Value call(Renderer& renderer, Arguments& args) const override {
    switch (receiver_.kind()) {
      case Value::Kind::String:
        if (receiver_.markup()) return call_markup_method(renderer, receiver_.as_string(), name_, args);
        return call_str_method(renderer, receiver_.as_string(), name_, args, false);
      case Value::Kind::Dict: return call_dict_method(receiver_, name_, args);
      default: return call_sequence_method(receiver_, name_, args);
    }
  }

 private:
  Value receiver_;
  std::string name_;
};

}  // namespace

bool has_method(const Value& receiver, const std::string& name) {
  const auto* methods = methods_of(receiver);
  return methods != nullptr && methods->count(name) != 0;
}

Value bound_method(const Value& receiver, const std::string& name) {
  if (!receiver.is_string() && kUnsafe.count(name) != 0) {
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(receiver) + "' object is unsafe.");
  }
  return Value::object(std::make_shared<BoundMethod>(receiver, name));
}

}  // namespace finetune::jinja
