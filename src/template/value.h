// The values a chat template computes with, modelled on the Python objects jinja2 sees:
// jinja2's default Undefined, None, bool, int, float, str (plus markupsafe's Markup flag), list,
// tuple, dict (insertion-ordered, Python key equality: 1 == 1.0 == True), the single-pass iterators
// some filters return (generators, reversed lists; dict views), and objects (namespace, macros,
// builtin functions, bound methods, loop contexts).
//
// Values are immutable once built, as in jinja2's ImmutableSandboxedEnvironment, except namespaces
// (attribute assignment), iterators (consumed once) and the state of loop contexts, cyclers and
// joiners; containers are shared, so copies are cheap.
//
// Note [Value nesting]
// Containers record their nesting depth when built, and building one deeper than kMaxValueDepth
// fails: recursive walks (repr, tojson, comparison, destruction) then stay within the stack.
// Objects that hold values report a depth too (a bound method one more than its receiver).
// Namespaces are mutable and may even contain themselves, so they count as depth 0; instead the
// renderer keeps every namespace alive until the render ends and then releases their attributes
// one namespace at a time, so chains and cycles of namespaces are neither destroyed recursively
// nor leaked. A loop context is released when its loop ends. Walks that can enter a namespace
// (repr) count their depth.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace finetune::jinja {

class Renderer;
class Value;
class Object;
class Dict;
struct IteratorState;

constexpr int kMaxValueDepth = 256;

// A failure while evaluating, without a location: the renderer adds the template name and line
// of the node being evaluated and rethrows it as a TemplateError.
struct RenderFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using ValueList = std::vector<Value>;

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Iterator, Object };

  Value() = default;  // Undefined
  static Value undefined(std::string hint = "");
  static Value none();
  static Value boolean(bool value);
  static Value integer(int64_t value);
  static Value number(double value);
  static Value string(std::string text, bool markup = false);
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value dict(Dict dict);
  static Value iterator(std::shared_ptr<IteratorState> state);
  static Value object(std::shared_ptr<Object> object);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Bool || kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Bool || kind_ == Kind::Int; }  // Python int (bool included)
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::Tuple; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_iterator() const { return kind_ == Kind::Iterator; }
  bool is_object() const { return kind_ == Kind::Object; }

  bool as_bool() const { return std::get<bool>(payload_); }
  int64_t as_int() const;     // Bool or Int
  double as_double() const;   // any number
  const std::string& as_string() const { return *std::get<StringPtr>(payload_); }
  bool markup() const { return markup_; }
  const ValueList& as_list() const { return *std::get<ListPtr>(payload_); }  // List or Tuple
  const Dict& as_dict() const { return *std::get<DictPtr>(payload_); }
  IteratorState& as_iterator() const { return *std::get<IteratorPtr>(payload_); }
  Object& as_object() const { return *std::get<ObjectPtr>(payload_); }
  const std::shared_ptr<Object>& object_ptr() const { return std::get<ObjectPtr>(payload_); }
  const std::string& undefined_hint() const;  // "'x' is undefined", or "" when none was given

  int depth() const { return depth_; }  // container nesting, 0 for scalars
  // Python `is`: same object (or equal singletons / small ints, as CPython caches them).
  bool same_object(const Value& other) const;

 private:
  using StringPtr = std::shared_ptr<const std::string>;
  using ListPtr = std::shared_ptr<const ValueList>;
  using DictPtr = std::shared_ptr<const Dict>;
  using IteratorPtr = std::shared_ptr<IteratorState>;
  using ObjectPtr = std::shared_ptr<Object>;

  Kind kind_ = Kind::Undefined;
  bool markup_ = false;
  uint16_t depth_ = 0;
  std::variant<std::monostate, bool, int64_t, double, StringPtr, ListPtr, DictPtr, IteratorPtr, ObjectPtr> payload_;
};

// A Python dict: insertion order, Python key equality; string keys are indexed.
class Dict {
 public:
  using Item = std::pair<Value, Value>;

  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  // Replaces the value of an equal key in place, else appends. Unhashable keys (list, dict) fail.
  void set(Value key, Value value);
  const std::vector<Item>& items() const { return items_; }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> string_keys_;
};

// What iterating some filters' results yields. Generators and reversed-list iterators are single
// pass, have no len() and are always true; dict views (keys(), values(), items()) can be walked
// again, have a length and are true when non-empty.
struct IteratorState {
  std::string type_name;  // "generator", "list_reverseiterator", "dict_keys", ...
  ValueList items;
  size_t position = 0;
  bool single_pass = true;

  ValueList take_all();  // what is left, consuming it when single pass
};

// Arguments of a call: positional, then keyword in call order.
struct Arguments {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keywords;
};

class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;  // Python's type name, for messages
  virtual std::string repr() const;
  // jinja2's getattr; Undefined when there is no such attribute.
  virtual Value attribute(const std::string& name) const;
  virtual bool callable() const { return false; }
  virtual Value call(Renderer& renderer, Arguments& args) const;
  // Nesting depth of the values it holds (Note [Value nesting]).
  virtual int depth() const { return 0; }
  // Drops the values a mutable object holds (Note [Value nesting]).
  virtual void release() {}
};

// namespace(): the one mutable object, assigned with {% set ns.attr = value %}.
class Namespace : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  Value attribute(const std::string& name) const override;
  void set(const std::string& name, Value value) { attributes_.set(Value::string(name), std::move(value)); }
  const Dict& attributes() const { return attributes_; }
  void release() override { attributes_ = Dict(); }

 private:
  Dict attributes_;
};

// Python truthiness; Undefined is false.
bool truthy(const Value& value);

// Python ==; Undefined equals only Undefined (jinja2's Undefined.__eq__).
bool python_equal(const Value& a, const Value& b);

// Python's <, <=, >, >= as -1/0/1 ordering; numbers, strings, lists and tuples of the same
// kind compare, anything else is a TypeError (an Undefined operand an UndefinedError).
int python_compare(const Value& a, const Value& b);

// Python's len(); fails for values without a length (numbers, generators, objects).
size_t python_length(const Value& value);

// What `for x in value` walks: list/tuple items, dict keys, string characters, an iterator's
// remaining items; Undefined yields nothing. Other values fail ("'int' object is not iterable").
ValueList iterate(const Value& value);

// Python's type name ("str", "dict", "NoneType"), and jinja2's object_type_repr for messages
// ("dict object", "None").
std::string type_name(const Value& value);
std::string object_type_repr(const Value& value);

// An Undefined that reports `name` as missing, and the error using an Undefined raises.
Value undefined_name(const std::string& name);
[[noreturn]] void throw_undefined(const Value& undefined);

// JSON input (render context) to values; objects keep their key order.
Value value_from_json(const nlohmann::ordered_json& json);

}  // namespace finetune::jinja
