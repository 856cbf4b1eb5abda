#include "value.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "python_text.h"

namespace finetune::jinja {
namespace {

uint16_t nesting_depth(const ValueList& items) {
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  if (depth + 1 > kMaxValueDepth) {
    throw RenderFailure("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  return static_cast<uint16_t>(depth + 1);
}

bool hashable(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::List:
    case Value::Kind::Dict: return false;
    case Value::Kind::Tuple:
      return std::all_of(key.as_list().begin(), key.as_list().end(), [](const Value& v) { return hashable(v); });
    default: return true;
  }
}

// Exact comparison of an int with a float, as Python does (no rounding of large ints).
int compare_int_float(int64_t i, double f) {
  if (std::isnan(f)) return 2;  // unordered
  if (f >= 9223372036854775808.0) return -1;
  if (f < -9223372036854775808.0) return 1;
  const double floor_f = std::floor(f);
  const auto whole = static_cast<int64_t>(floor_f);
  if (i != whole) return i < whole ? -1 : 1;
  return floor_f == f ? 0 : -1;
}

int compare_numbers(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    const int64_t x = a.as_int();
    const int64_t y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_integral()) return compare_int_float(a.as_int(), b.as_double());
  if (b.is_integral()) {
    const int c = compare_int_float(b.as_int(), a.as_double());
    return c == 2 ? 2 : -c;
  }
  const double x = a.as_double();
  const double y = b.as_double();
  if (std::isnan(x) || std::isnan(y)) return 2;
  return x < y ? -1 : (x > y ? 1 : 0);
}

[[noreturn]] void throw_not_comparable(const Value& a, const Value& b) {
  throw RenderFailure("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

}  // namespace

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.payload_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value Value::boolean(bool value) {
  Value v;
  v.kind_ = Kind::Bool;
  v.payload_ = value;
  return v;
}

Value Value::integer(int64_t value) {
  Value v;
  v.kind_ = Kind::Int;
  v.payload_ = value;
  return v;
}

Value Value::number(double value) {
  Value v;
  v.kind_ = Kind::Float;
  v.payload_ = value;
  return v;
}

Value Value::string(std::string text, bool markup) {
  Value v;
  v.kind_ = Kind::String;
  v.markup_ = markup;
  v.payload_ = std::make_shared<const std::string>(std::move(text));
  return v;
}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::List;
  v.depth_ = nesting_depth(items);
  v.payload_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}

Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}

Value Value::dict(Dict dict) {
  Value v;
  v.kind_ = Kind::Dict;
  int depth = 0;
  for (const auto& [key, value] : dict.items()) depth = std::max({depth, key.depth(), value.depth()});
  if (depth + 1 > kMaxValueDepth) {
    throw RenderFailure("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  v.depth_ = static_cast<uint16_t>(depth + 1);
  v.payload_ = std::make_shared<const Dict>(std::move(dict));
  return v;
}

Value Value::iterator(std::shared_ptr<IteratorState> state) {
  Value v;
  v.kind_ = Kind::Iterator;
  v.depth_ = nesting_depth(state->items);
  v.payload_ = std::move(state);
  return v;
}

Value Value::object(std::shared_ptr<Object> object) {
  Value v;
  v.kind_ = Kind::Object;
  const int depth = object->depth();
  if (depth > kMaxValueDepth) {
    throw RenderFailure("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  v.depth_ = static_cast<uint16_t>(depth);
  v.payload_ = std::move(object);
  return v;
}

int64_t Value::as_int() const {
  if (kind_ == Kind::Bool) return std::get<bool>(payload_) ? 1 : 0;
  return std::get<int64_t>(payload_);
}

double Value::as_double() const {
  if (kind_ == Kind::Float) return std::get<double>(payload_);
  return static_cast<double>(as_int());
}

const std::string& Value::undefined_hint() const {
  static const std::string kEmpty;
  if (const auto* hint = std::get_if<StringPtr>(&payload_)) return **hint;
  return kEmpty;
}

bool Value::same_object(const Value& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::Bool: return as_bool() == other.as_bool();
    case Kind::Int: return as_int() == other.as_int() && as_int() >= -5 && as_int() <= 256;
    case Kind::Float: return false;
    default: return payload_ == other.payload_;
  }
}

const Value* Dict::find(const std::string& key) const {
  const auto it = string_keys_.find(key);
  return it == string_keys_.end() ? nullptr : &items_[it->second].second;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(key.as_string());
  if (!hashable(key)) throw RenderFailure("unhashable type: '" + type_name(key) + "'");
  for (const Item& item : items_) {
    if (!item.first.is_string() && python_equal(item.first, key)) return &item.second;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  if (key.is_string()) {
    const auto [it, inserted] = string_keys_.emplace(key.as_string(), items_.size());
    if (inserted) {
      items_.emplace_back(std::move(key), std::move(value));
    } else {
      items_[it->second].second = std::move(value);
    }
    return;
  }
  if (!hashable(key)) throw RenderFailure("unhashable type: '" + type_name(key) + "'");
  for (Item& item : items_) {
    if (!item.first.is_string() && python_equal(item.first, key)) {
      item.second = std::move(value);
      return;
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
}

ValueList IteratorState::take_all() {
  ValueList rest(items.begin() + static_cast<std::ptrdiff_t>(position), items.end());
  if (single_pass) position = items.size();
  return rest;
}

std::string Object::repr() const { return "<" + type_name() + " object>"; }

Value Object::attribute(const std::string& name) const {
  return Value::undefined("'" + type_name() + " object' has no attribute '" + name + "'");
}

Value Object::call(Renderer&, Arguments&) const {
  throw RenderFailure("'" + type_name() + "' object is not callable");
}

Value Namespace::attribute(const std::string& name) const {
  if (const Value* value = attributes_.find(name)) return *value;
  return Value::undefined("'jinja2.utils.Namespace object' has no attribute '" + name + "'");
}

bool truthy(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return value.as_bool();
    case Value::Kind::Int: return value.as_int() != 0;
    case Value::Kind::Float: return value.as_double() != 0.0;
    case Value::Kind::String: return !value.as_string().empty();
    case Value::Kind::List:
    case Value::Kind::Tuple: return !value.as_list().empty();
    case Value::Kind::Dict: return !value.as_dict().empty();
    case Value::Kind::Iterator: {
      const IteratorState& state = value.as_iterator();
      return state.single_pass || state.position < state.items.size();
    }
    case Value::Kind::Object: return true;
  }
  return false;
}

bool python_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == 0;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return a.kind() == b.kind();
    case Value::Kind::String: return b.is_string() && a.as_string() == b.as_string();
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      if (a.kind() != b.kind()) return false;
      const ValueList& x = a.as_list();
      const ValueList& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!python_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::Dict: {
      if (!b.is_dict() || a.as_dict().size() != b.as_dict().size()) return false;
      for (const auto& [key, value] : a.as_dict().items()) {
        const Value* other = b.as_dict().find(key);
        if (other == nullptr || !python_equal(value, *other)) return false;
      }
      return true;
    }
    case Value::Kind::Iterator:
    case Value::Kind::Object: return a.same_object(b);
    default: return false;
  }
}

int python_compare(const Value& a, const Value& b) {
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  if (a.is_number() && b.is_number()) {
    const int c = compare_numbers(a, b);
    if (c == 2) return 2;  // NaN: every ordering comparison is false; callers treat 2 as "unordered"
    return c;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_sequence() && a.kind() == b.kind()) {
    const ValueList& x = a.as_list();
    const ValueList& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!python_equal(x[i], y[i])) return python_compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw_not_comparable(a, b);
}

size_t python_length(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return code_point_count(value.as_string());
    case Value::Kind::List:
    case Value::Kind::Tuple: return value.as_list().size();
    case Value::Kind::Dict: return value.as_dict().size();
    case Value::Kind::Iterator:
      if (!value.as_iterator().single_pass) return value.as_iterator().items.size();
      break;
    default: break;
  }
  throw RenderFailure("object of type '" + type_name(value) + "' has no len()");
}

ValueList iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::String: {
      ValueList chars;
      const std::string& text = value.as_string();
      for (size_t i = 0; i < text.size();) {
        size_t end = i + 1;
        while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
        chars.push_back(Value::string(text.substr(i, end - i)));
        i = end;
      }
      return chars;
    }
    case Value::Kind::List:
    case Value::Kind::Tuple: return value.as_list();
    case Value::Kind::Dict: {
      ValueList keys;
      keys.reserve(value.as_dict().size());
      for (const auto& item : value.as_dict().items()) keys.push_back(item.first);
      return keys;
    }
    case Value::Kind::Iterator: return value.as_iterator().take_all();
    default: break;
  }
  throw RenderFailure("'" + type_name(value) + "' object is not iterable");
}

std::string type_name(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return value.markup() ? "Markup" : "str";
    case Value::Kind::List: return "list";
    case Value::Kind::Tuple: return "tuple";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Iterator: return value.as_iterator().type_name;
    case Value::Kind::Object: return value.as_object().type_name();
  }
  return "object";
}

std::string object_type_repr(const Value& value) {
  if (value.is_none()) return "None";
  return type_name(value) + " object";
}

Value undefined_name(const std::string& name) { return Value::undefined("'" + name + "' is undefined"); }

void throw_undefined(const Value& undefined) {
  const std::string& hint = undefined.undefined_hint();
  throw RenderFailure(hint.empty() ? "value is undefined" : hint);
}

namespace {

Value from_json(const nlohmann::ordered_json& json, int depth) {
  if (depth > kMaxValueDepth) {
    throw RenderFailure("context value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto value = json.get<uint64_t>();
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw RenderFailure("context integer " + std::to_string(value) + " is out of range");
      }
      return Value::integer(static_cast<int64_t>(value));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict dict;
      for (const auto& [key, item] : json.items()) dict.set(Value::string(key), from_json(item, depth + 1));
      return Value::dict(std::move(dict));
    }
    default: break;
  }
  throw RenderFailure("context holds a value of JSON type '" + std::string(json.type_name()) + "'");
}

}  // namespace

Value value_from_json(const nlohmann::ordered_json& json) { return from_json(json, 1); }

}  // namespace finetune::jinja
