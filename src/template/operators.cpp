#include "operators.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "python_format.h"
#include "python_text.h"
#include "renderer.h"

namespace finetune::jinja {
namespace {

[[noreturn]] void throw_unsupported(const char* op, const Value& a, const Value& b) {
  throw RenderFailure(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
                      type_name(b) + "'");
}

[[noreturn]] void throw_overflow() {
  throw RenderFailure("integer result does not fit in 64 bits");
}

// a op b with overflow detection (op: one of __builtin_{add,sub,mul}_overflow).
template <class Op>
int64_t checked(Op op, int64_t a, int64_t b) {
  int64_t result;
  if (op(a, b, &result)) throw_overflow();
  return result;
}

bool add_overflow(int64_t a, int64_t b, int64_t* out) { return __builtin_add_overflow(a, b, out); }
bool sub_overflow(int64_t a, int64_t b, int64_t* out) { return __builtin_sub_overflow(a, b, out); }
bool mul_overflow(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

Value add(const Value& a, const Value& b, Renderer& renderer) {
  if (a.is_integral() && b.is_integral()) {
    return Value::integer(checked(add_overflow, a.as_int(), b.as_int()));
  }
  if (a.is_number() && b.is_number()) return Value::number(a.as_double() + b.as_double());
  if (a.is_string() && b.is_string()) {
    renderer.charge_size(a.as_string().size() + b.as_string().size());
    // markupsafe: Markup + str escapes the str (and str + Markup too).
    if (a.markup() != b.markup()) {
      return Value::string(a.markup() ? a.as_string() + html_escape(b.as_string())
                                      : html_escape(a.as_string()) + b.as_string(),
                           true);
    }
    return Value::string(a.as_string() + b.as_string(), a.markup());
  }
  if (a.is_sequence() && a.kind() == b.kind()) {
    renderer.charge_size(a.as_list().size() + b.as_list().size());
    ValueList items = a.as_list();
    items.insert(items.end(), b.as_list().begin(), b.as_list().end());
    return a.is_list() ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }
  if (a.is_string() || a.is_sequence()) {
    const std::string name = type_name(a);
    throw RenderFailure("can only concatenate " + name + " (not \"" + type_name(b) + "\") to " + name);
  }
  throw_unsupported("+", a, b);
}

Value repeat(const Value& sequence, int64_t times, Renderer& renderer) {
  if (times < 0) times = 0;
  const size_t unit = sequence.is_string() ? sequence.as_string().size() : sequence.as_list().size();
  if (unit != 0 && static_cast<uint64_t>(times) > std::numeric_limits<size_t>::max() / unit) throw_overflow();
  renderer.charge_size(unit * static_cast<size_t>(times));
  if (sequence.is_string()) {
    const size_t total = unit * static_cast<size_t>(times);
    std::string out;
    out.reserve(total);
    out = sequence.as_string();
    while (!out.empty() && out.size() * 2 <= total) out += out;  // doubling: memcpy-sized copies
    out.append(out, 0, total - std::min(out.size(), total));
    out.resize(total);
    return Value::string(std::move(out), sequence.markup());
  }
  ValueList items;
  items.reserve(unit * static_cast<size_t>(times));
  for (int64_t i = 0; i < times; ++i) items.insert(items.end(), sequence.as_list().begin(), sequence.as_list().end());
  return sequence.is_list() ? Value::list(std::move(items)) : Value::tuple(std::move(items));
}

Value multiply(const Value& a, const Value& b, Renderer& renderer) {
  if (a.is_integral() && b.is_integral()) {
    return Value::integer(checked(mul_overflow, a.as_int(), b.as_int()));
  }
  if (a.is_number() && b.is_number()) return Value::number(a.as_double() * b.as_double());
  const bool a_sequence = a.is_string() || a.is_sequence();
  const bool b_sequence = b.is_string() || b.is_sequence();
  if (a_sequence && b.is_integral()) return repeat(a, b.as_int(), renderer);
  if (b_sequence && a.is_integral()) return repeat(b, a.as_int(), renderer);
  if (a_sequence || b_sequence) {
    throw RenderFailure("can't multiply sequence by non-int of type '" + type_name(a_sequence ? b : a) + "'");
  }
  throw_unsupported("*", a, b);
}

// Python's float divmod: the quotient floored, the remainder with the divisor's sign.
std::pair<double, double> float_divmod(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0.0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  return {floordiv, mod};
}

Value divide(ChainOp op, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) throw_unsupported(op == ChainOp::Divide ? "/" : (op == ChainOp::Modulo ? "%" : "//"), a, b);
  if (op == ChainOp::Divide) {
    if (b.as_double() == 0.0) throw RenderFailure("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (a.is_integral() && b.is_integral()) {
    const int64_t x = a.as_int();
    const int64_t y = b.as_int();
    if (y == 0) throw RenderFailure("integer division or modulo by zero");
    if (x == std::numeric_limits<int64_t>::min() && y == -1) {
      if (op == ChainOp::Modulo) return Value::integer(0);
      throw_overflow();
    }
    int64_t quotient = x / y;
    int64_t remainder = x % y;
    if (remainder != 0 && ((remainder < 0) != (y < 0))) {
      --quotient;
      remainder += y;
    }
    return Value::integer(op == ChainOp::Modulo ? remainder : quotient);
  }
  if (b.as_double() == 0.0) {
    throw RenderFailure(op == ChainOp::Modulo ? "float modulo" : "float floor division by zero");
  }
  const auto [quotient, remainder] = float_divmod(a.as_double(), b.as_double());
  return Value::number(op == ChainOp::Modulo ? remainder : quotient);
}

Value power(const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) throw_unsupported("** or pow()", a, b);
  if (a.is_integral() && b.is_integral() && b.as_int() >= 0) {
    int64_t base = a.as_int();
    int64_t exponent = b.as_int();
    int64_t result = 1;
    while (exponent > 0) {
      if (exponent & 1) result = checked(mul_overflow, result, base);
      exponent >>= 1;
      if (exponent > 0) base = checked(mul_overflow, base, base);
    }
    return Value::integer(result);
  }
  const double x = a.as_double();
  const double y = b.as_double();
  if (x == 0.0 && y < 0) throw RenderFailure("0.0 cannot be raised to a negative power");
  if (x < 0 && std::floor(y) != y) throw RenderFailure("complex results (a negative number to a fractional power) are not supported");
  const double result = std::pow(x, y);
  if (std::isinf(result) && std::isfinite(x) && std::isfinite(y)) throw RenderFailure("(34, 'Numerical result out of range')");
  return Value::number(result);
}

}  // namespace

Value python_binary(ChainOp op, const Value& a, const Value& b, Renderer& renderer) {
  if (op == ChainOp::Modulo && a.is_string()) {  // str % anything formats (an Undefined prints as "")
    std::string text = python_percent_format(a.as_string(), b, a.markup());
    renderer.charge_size(text.size());
    return Value::string(std::move(text), a.markup());
  }
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  switch (op) {
    case ChainOp::Add: return add(a, b, renderer);
    case ChainOp::Subtract:
      if (a.is_integral() && b.is_integral()) {
        return Value::integer(checked(sub_overflow, a.as_int(), b.as_int()));
      }
      if (a.is_number() && b.is_number()) return Value::number(a.as_double() - b.as_double());
      throw_unsupported("-", a, b);
    case ChainOp::Multiply: return multiply(a, b, renderer);
    case ChainOp::Modulo: return divide(op, a, b);
    case ChainOp::Divide:
    case ChainOp::FloorDivide: return divide(op, a, b);
    case ChainOp::Power: return power(a, b);
    default: break;
  }
  throw RenderFailure("not a binary operator");
}

Value python_negate(const Value& operand) {
  if (operand.is_undefined()) throw_undefined(operand);
  if (operand.is_integral()) {
    if (operand.as_int() == std::numeric_limits<int64_t>::min()) throw_overflow();
    return Value::integer(-operand.as_int());
  }
  if (operand.is_float()) return Value::number(-operand.as_double());
  throw RenderFailure("bad operand type for unary -: '" + type_name(operand) + "'");
}

Value python_positive(const Value& operand) {
  if (operand.is_undefined()) throw_undefined(operand);
  if (operand.is_integral()) return Value::integer(operand.as_int());
  if (operand.is_float()) return operand;
  throw RenderFailure("bad operand type for unary +: '" + type_name(operand) + "'");
}

bool python_contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
      if (!item.is_string()) {
        throw RenderFailure("'in <string>' requires string as left operand, not " + type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      for (const Value& element : container.as_list()) {
        if (python_equal(element, item)) return true;
      }
      return false;
    case Value::Kind::Dict: return container.as_dict().find(item) != nullptr;
    case Value::Kind::Iterator: {
      IteratorState& state = container.as_iterator();
      for (size_t i = state.position; i < state.items.size(); ++i) {
        if (python_equal(state.items[i], item)) {
          if (state.single_pass) state.position = i + 1;  // a generator is consumed up to the match
          return true;
        }
      }
      if (state.single_pass) state.position = state.items.size();
      return false;
    }
    default: break;
  }
  throw RenderFailure("argument of type '" + type_name(container) + "' is not iterable");
}

}  // namespace finetune::jinja
