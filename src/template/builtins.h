// jinja2's built-in filters, tests and global functions, as transformers' environment has them
// (its tojson filter, raise_exception and strftime_now globals), and the attribute / item access
// rules of its sandbox (methods of str, dict and list; unsafe mutating methods refused).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "value.h"

namespace finetune::jinja {

using FilterFunction = Value (*)(Renderer& renderer, const Value& operand, Arguments& args);
using TestFunction = bool (*)(Renderer& renderer, const Value& operand, Arguments& args);

FilterFunction find_filter(const std::string& name);  // nullptr when there is no such filter
TestFunction find_test(const std::string& name);      // nullptr when there is no such test

// range, dict, namespace, cycler, joiner, raise_exception, strftime_now; Undefined otherwise.
Value find_global(const std::string& name);

// obj.name (jinja2's getattr: a method or attribute first, then obj[name]) and obj[key]
// (getitem: the item first, then for a string key the attribute). Missing: Undefined.
// An Undefined object fails.
Value get_attribute(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);
// obj[start:stop:step] on a list, tuple or string (None bounds are omitted ones). Anything else
// is a TypeError, or with `lenient` (a constant expression, GetItemExpr::constant) Undefined.
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step, bool lenient);

// Python-style argument binding for a builtin: `names` are its parameters after any operand, the
// first `required` of them mandatory. Fails on unknown keywords, too many arguments or a missing
// one, naming `function`.
std::vector<std::optional<Value>> bind_arguments(const std::string& function, Arguments& args,
                                                 const std::vector<std::string>& names, size_t required = 0);

}  // namespace finetune::jinja
