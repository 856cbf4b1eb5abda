// Macros and the callers of {% call %} blocks as values: calling one runs its body in a new scope
// whose parent is the scope the macro was defined in (Renderer::call_macro binds the arguments as
// jinja2's Macro.__call__ does).
#pragma once

#include <memory>

#include "ast.h"
#include "scope.h"
#include "value.h"

namespace finetune::jinja {

Value macro_value(const MacroDefinition& macro, const std::shared_ptr<Scope>& closure);

}  // namespace finetune::jinja
