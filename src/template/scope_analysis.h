// Note [Static scoping]
// jinja2 resolves names when it compiles a template (its idtracking.py): every frame (the template,
// a loop body, a macro or caller body, a filter/set/with/generation/block body) has a symbol table
// built from its own statements in order. A name the frame reads before assigning it is looked up
// outside; a name it assigns without reading first starts the frame bound to "missing", i.e.
// Undefined, and frames nested inside it see that binding, not a variable of the same name further
// out. For instance, in
//     {% for m in messages %}{{ bos_token }}{% endfor %}{% set bos_token = 'x' %}
// the loop prints nothing although the context has bos_token. Assignments inside {% if %} branches
// are the exception: jinja2 treats a name first assigned in a branch as read from outside.
//
// The renderer looks names up through nested scopes at run time; analyze_scopes computes, for each
// frame, the names jinja2 binds to Undefined at its start (UnboundNames in ast.h), and the
// renderer binds them when it creates the frame's scope, which gives the same results.
#pragma once

#include "ast.h"

namespace finetune::jinja {

void analyze_scopes(TemplateProgram& program);

}  // namespace finetune::jinja
