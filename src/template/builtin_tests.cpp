// jinja2's tests (x is defined, x is string, x is divisibleby 3, ...), with its semantics
// (tests.py): e.g. Undefined is iterable, a sequence and callable; a dict is a sequence; a bool
// is a number but not an integer.
#include <unordered_map>

#include "builtins.h"
#include "filters.h"
#include "operators.h"
#include "python_text.h"
#include "renderer.h"

namespace finetune::jinja {
namespace {

const Value& operand_argument(const std::string& test, Arguments& args) {
  if (args.positional.size() != 1 || !args.keywords.empty()) {
    throw RenderFailure("test '" + test + "' takes exactly one argument");
  }
  return args.positional.front();
}

void none(const std::string& test, Arguments& args) {
  if (!args.positional.empty() || !args.keywords.empty()) throw RenderFailure("test '" + test + "' takes no arguments");
}

bool test_defined(Renderer&, const Value& v, Arguments& a) { none("defined", a); return !v.is_undefined(); }
bool test_undefined(Renderer&, const Value& v, Arguments& a) { none("undefined", a); return v.is_undefined(); }
bool test_none(Renderer&, const Value& v, Arguments& a) { none("none", a); return v.is_none(); }
bool test_boolean(Renderer&, const Value& v, Arguments& a) { none("boolean", a); return v.is_bool(); }
bool test_false(Renderer&, const Value& v, Arguments& a) { none("false", a); return v.is_bool() && !v.as_bool(); }
bool test_true(Renderer&, const Value& v, Arguments& a) { none("true", a); return v.is_bool() && v.as_bool(); }
bool test_integer(Renderer&, const Value& v, Arguments& a) { none("integer", a); return v.is_int(); }
bool test_float(Renderer&, const Value& v, Arguments& a) { none("float", a); return v.is_float(); }
bool test_number(Renderer&, const Value& v, Arguments& a) { none("number", a); return v.is_number(); }
bool test_string(Renderer&, const Value& v, Arguments& a) { none("string", a); return v.is_string(); }
bool test_mapping(Renderer&, const Value& v, Arguments& a) { none("mapping", a); return v.is_dict(); }
bool test_escaped(Renderer&, const Value& v, Arguments& a) { none("escaped", a); return v.is_string() && v.markup(); }

bool test_iterable(Renderer&, const Value& v, Arguments& a) {
  none("iterable", a);
  if (v.is_object()) return v.as_object().type_name() == "LoopContext";
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict() || v.is_iterator();
}

// len() and __getitem__: str, list, tuple, dict, and Undefined.
bool test_sequence(Renderer&, const Value& v, Arguments& a) {
  none("sequence", a);
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
}

bool test_callable(Renderer&, const Value& v, Arguments& a) {
  none("callable", a);
  return v.is_undefined() || (v.is_object() && v.as_object().callable());
}

bool remainder_is(Renderer& renderer, const Value& v, const Value& divisor, int64_t expected) {
  return python_equal(python_binary(ChainOp::Modulo, v, divisor, renderer), Value::integer(expected));
}

bool test_odd(Renderer& r, const Value& v, Arguments& a) { none("odd", a); return remainder_is(r, v, Value::integer(2), 1); }
bool test_even(Renderer& r, const Value& v, Arguments& a) { none("even", a); return remainder_is(r, v, Value::integer(2), 0); }
bool test_divisibleby(Renderer& r, const Value& v, Arguments& a) {
  return remainder_is(r, v, operand_argument("divisibleby", a), 0);
}

bool test_lower(Renderer&, const Value& v, Arguments& a) { none("lower", a); return python_is(CharClass::Lower, soft_str(v)); }
bool test_upper(Renderer&, const Value& v, Arguments& a) { none("upper", a); return python_is(CharClass::Upper, soft_str(v)); }

bool test_sameas(Renderer&, const Value& v, Arguments& a) { return v.same_object(operand_argument("sameas", a)); }
bool test_in(Renderer&, const Value& v, Arguments& a) { return python_contains(operand_argument("in", a), v); }
bool test_eq(Renderer&, const Value& v, Arguments& a) { return python_equal(v, operand_argument("eq", a)); }
bool test_ne(Renderer&, const Value& v, Arguments& a) { return !python_equal(v, operand_argument("ne", a)); }
bool test_lt(Renderer&, const Value& v, Arguments& a) { return python_compare(v, operand_argument("lt", a)) == -1; }
bool test_gt(Renderer&, const Value& v, Arguments& a) { return python_compare(v, operand_argument("gt", a)) == 1; }
bool test_le(Renderer&, const Value& v, Arguments& a) {
  const int c = python_compare(v, operand_argument("le", a));
  return c == -1 || c == 0;
}
bool test_ge(Renderer&, const Value& v, Arguments& a) {
  const int c = python_compare(v, operand_argument("ge", a));
  return c == 1 || c == 0;
}

bool test_filter(Renderer&, const Value& v, Arguments& a) {
  none("filter", a);
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}

bool test_test(Renderer&, const Value& v, Arguments& a) {
  none("test", a);
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

}  // namespace

TestFunction find_test(const std::string& name) {
  static const std::unordered_map<std::string, TestFunction> kTests = {
      {"defined", test_defined},   {"undefined", test_undefined}, {"none", test_none},
      {"boolean", test_boolean},   {"false", test_false},         {"true", test_true},
      {"integer", test_integer},   {"float", test_float},         {"number", test_number},
      {"string", test_string},     {"mapping", test_mapping},     {"iterable", test_iterable},
      {"sequence", test_sequence}, {"callable", test_callable},   {"escaped", test_escaped},
      {"odd", test_odd},           {"even", test_even},           {"divisibleby", test_divisibleby},
      {"lower", test_lower},       {"upper", test_upper},         {"sameas", test_sameas},
      {"in", test_in},             {"eq", test_eq},               {"equalto", test_eq},
      {"==", test_eq},             {"ne", test_ne},               {"!=", test_ne},
      {"lt", test_lt},             {"lessthan", test_lt},         {"<", test_lt},
      {"le", test_le},             {"<=", test_le},               {"gt", test_gt},
      {"greaterthan", test_gt},    {">", test_gt},                {"ge", test_ge},
      {">=", test_ge},             {"filter", test_filter},       {"test", test_test},
  };
  const auto it = kTests.find(name);
  return it == kTests.end() ? nullptr : it->second;
}

}  // namespace finetune::jinja
