// Methods of Python's str, dict, list and tuple as a template calls them ("a,b".split(","),
// message.get("content"), messages.index(m)). Methods that would modify a value (list.append,
// dict.update, ...) are what jinja2's ImmutableSandboxedEnvironment refuses: looking one up gives
// an Undefined whose use fails with its "unsafe" message.
#pragma once

#include <string>

#include "value.h"

namespace finetune::jinja {

// Whether `receiver` (a str, dict, list or tuple) has a Python method `name`.
bool has_method(const Value& receiver, const std::string& name);

// receiver.name as a callable bound method (or the unsafe Undefined); has_method must hold.
Value bound_method(const Value& receiver, const std::string& name);

}  // namespace finetune::jinja
