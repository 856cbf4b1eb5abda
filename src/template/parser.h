// Builds the AST from tokens with jinja2's grammar (its Parser: statements, operator precedence,
// tuples without parentheses, tests with an argument and no parentheses, call arguments).
// Like jinja2's compiler, it rejects an unknown filter or test when the template is parsed, except
// inside an {% if %} (its condition and branches) or a conditional expression, where the error
// waits until the filter is actually applied.
//
// Note [Nesting limits]
// Parsing and evaluating recurse once per nesting level, so a hostile template such as 100 KB of
// "(" could exhaust the stack. The parser counts nesting (statements inside statements,
// parenthesised or bracketed expressions, unary operators, filter and call arguments) and fails past
// max_nesting_depth; every expression node also records its depth, and a node deeper than the
// limit fails too (deep trees also arise from long postfix or filter chains). Evaluation then
// recurses at most max_nesting_depth statements times max_nesting_depth expression levels per macro
// call, and macro calls nest at most max_macro_depth deep; the renderer also bounds its total
// recursion (Note [Evaluation depth] in renderer.h).
#pragma once

#include <memory>
#include <string>

#include "ast.h"

namespace finetune::jinja {

// Throws TemplateError (syntax errors, unknown filters/tests, nesting past the limit).
std::shared_ptr<TemplateProgram> parse_template(const std::string& source, const std::string& name,
                                                int max_nesting_depth);

}  // namespace finetune::jinja
