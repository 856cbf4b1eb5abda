// jinja2's compiler rejects a template that uses an unknown filter or test, except inside the soft
// frame of an {% if %} (its condition and branches, not nested loops, macros or blocks) or of a
// conditional expression, where the error waits until the filter or test is applied.
#pragma once

#include <string>

#include "ast.h"

namespace finetune::jinja {

// Throws TemplateError naming the template and the line of the first unknown filter or test
// outside a soft frame.
void check_filter_and_test_names(const Body& body, const std::string& template_name);

}  // namespace finetune::jinja
