// jinja2's sandboxed attribute and item access, slicing, and argument binding for builtins.
#include <algorithm>

#include "builtins.h"
#include "methods.h"
#include "python_repr.h"
#include "python_text.h"

namespace finetune::jinja {
namespace {

Value missing_attribute(const Value& object, const std::string& name) {
  return Value::undefined("'" + object_type_repr(object) + "' has no attribute '" + name + "'");
}

// Python's slice.indices(): the positions a slice selects in a sequence of `length` items.
std::vector<size_t> slice_positions(int64_t length, const Value* start, const Value* stop, const Value* step) {
  const int64_t stride = step->is_none() ? 1 : step->as_int();
  if (stride == 0) throw RenderFailure("slice step cannot be zero");
  const int64_t lower = stride > 0 ? 0 : -1;
  const int64_t upper = stride > 0 ? length : length - 1;
  auto adjust = [&](const Value* bound, int64_t fallback) {
    if (bound->is_none()) return fallback;
    int64_t v = bound->as_int();
    if (v < 0) {
      v += length;
      if (v < lower) v = lower;
    } else if (v > upper) {
      v = upper;
    }
    return v;
  };
  const int64_t first = adjust(start, stride > 0 ? lower : upper);
  const int64_t last = adjust(stop, stride > 0 ? upper : lower);
  std::vector<size_t> positions;
  for (int64_t i = first; stride > 0 ? i < last : i > last; i += stride) positions.push_back(static_cast<size_t>(i));
  return positions;
}

}  // namespace

Value get_attribute(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Value::Kind::Undefined: throw_undefined(object);
    case Value::Kind::Object: return object.as_object().attribute(name);
    case Value::Kind::Dict:
      if (has_method(object, name)) return bound_method(object, name);
      if (const Value* value = object.as_dict().find(name)) return *value;
      break;
    case Value::Kind::Bool:
    case Value::Kind::Int:
    case Value::Kind::Float:
      if (name == "real") return object.is_float() ? object : Value::integer(object.as_int());
      if (name == "imag") return object.is_float() ? Value::number(0.0) : Value::integer(0);
      if (object.is_integral() && name == "numerator") return Value::integer(object.as_int());
      if (object.is_integral() && name == "denominator") return Value::integer(1);
      break;
    default:
      if (has_method(object, name)) return bound_method(object, name);
      break;
  }
  return missing_attribute(object, name);
}

Value get_item(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Value::Kind::Undefined: throw_undefined(object);
    case Value::Kind::Dict: {
      const bool hashable = !key.is_list() && !key.is_dict();
      if (hashable) {
        if (const Value* value = object.as_dict().find(key)) return *value;
      }
      break;
    }
    case Value::Kind::List:
    case Value::Kind::Tuple:
    case Value::Kind::String:
      if (key.is_integral()) {
        const int64_t length = object.is_string() ? static_cast<int64_t>(code_point_count(object.as_string()))
                                                  : static_cast<int64_t>(object.as_list().size());
        int64_t index = key.as_int();
        if (index < 0) index += length;
        if (index >= 0 && index < length) {
          if (!object.is_string()) return object.as_list()[static_cast<size_t>(index)];
          const std::string& text = object.as_string();
          const size_t begin = byte_offset_of(text, static_cast<size_t>(index));
          size_t end = begin + 1;
          while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
          return Value::string(text.substr(begin, end - begin), object.markup());
        }
      }
      break;
    default: break;
  }
  if (key.is_string()) {
    if (object.is_dict()) return has_method(object, key.as_string()) ? bound_method(object, key.as_string())
                                                                     : missing_attribute(object, key.as_string());
    return get_attribute(object, key.as_string());
  }
  return Value::undefined(object_type_repr(object) + " has no element " + python_repr(key));
}

// jinja2 compiles x[a:b] to a plain Python subscript (no getitem fallback), so failures raise.
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step, bool lenient) {
  if (object.is_undefined()) throw_undefined(object);
  auto type_error = [&](const std::string& message) {
    if (lenient) return Value::undefined(object_type_repr(object) + " has no element slice");
    throw RenderFailure(message);
  };
  if (object.is_dict()) return type_error("unhashable type: 'slice'");
  if (!object.is_sequence() && !object.is_string()) {
    return type_error("'" + type_name(object) + "' object is not subscriptable");
  }
  for (const Value* bound : {&start, &stop, &step}) {
    if (!bound->is_none() && !bound->is_integral()) {
      return type_error("slice indices must be integers or None or have an __index__ method");
    }
  }
  if (object.is_sequence()) {
    const ValueList& items = object.as_list();
    ValueList out;
    for (const size_t i : slice_positions(static_cast<int64_t>(items.size()), &start, &stop, &step)) out.push_back(items[i]);
    return object.is_list() ? Value::list(std::move(out)) : Value::tuple(std::move(out));
  }
  const std::vector<char32_t> text = decode_utf8(object.as_string());
  std::vector<char32_t> out;
  for (const size_t i : slice_positions(static_cast<int64_t>(text.size()), &start, &stop, &step)) out.push_back(text[i]);
  return Value::string(encode_utf8(out), object.markup());
}

std::vector<std::optional<Value>> bind_arguments(const std::string& function, Arguments& args,
                                                 const std::vector<std::string>& names, size_t required) {
  if (args.positional.size() > names.size()) {
    throw RenderFailure(function + "() takes at most " + std::to_string(names.size()) + " argument(s) (" +
                        std::to_string(args.positional.size()) + " given)");
  }
  std::vector<std::optional<Value>> bound(names.size());
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (const auto& [key, value] : args.keywords) {
    const auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) throw RenderFailure(function + "() got an unexpected keyword argument '" + key + "'");
    const auto index = static_cast<size_t>(it - names.begin());
    if (bound[index]) throw RenderFailure(function + "() got multiple values for argument '" + key + "'");
    bound[index] = value;
  }
  for (size_t i = 0; i < required; ++i) {
    if (!bound[i]) throw RenderFailure(function + "() missing required argument '" + names[i] + "'");
  }
  return bound;
}

}  // namespace finetune::jinja
