// The filter tables (jinja2's built-in filters plus transformers' tojson), by family, and what
// the families share. find_filter (builtins.h) looks names up in all of them.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "builtins.h"

namespace finetune::jinja {

struct NamedFilter {
  const char* name;
  FilterFunction function;
};

const std::vector<NamedFilter>& text_filters();      // strings and numbers: upper, trim, tojson, int, round, ...
const std::vector<NamedFilter>& sequence_filters();  // collections: join, map, selectattr, sort, ...

// A single-pass iterator over `items`, as jinja2's generator-returning filters give.
Value make_generator(const std::string& type_name, ValueList items);

// jinja2's make_attrgetter: "a.b.0" looks up item a, then b, then 0 (digits are indexes);
// with a default, an Undefined result becomes the default.
using AttributeGetter = std::function<Value(const Value&)>;
AttributeGetter attribute_getter(const Value& attribute, const std::optional<Value>& default_value = std::nullopt);

// str(value) as jinja2's soft_str does it (Undefined is "").
std::string soft_str(const Value& value);

// A filter that takes no arguments besides its operand.
void no_arguments(const std::string& filter, Arguments& args);

}  // namespace finetune::jinja
