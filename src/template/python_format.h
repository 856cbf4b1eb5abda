// Python string formatting: printf-style `format % args` (the % operator and jinja2's format
// filter) and str.format(*args, **kwargs) with the common format-spec features.
// Supported: %s %r %a %d %i %u %x %X %o %e %E %f %F %g %G %c %% with %(key)s, flags -+ #0, width
// and precision (also *); str.format fields {} {0} {name} with .attr / [key] access, !r !s !a, and
// specs [[fill]align][sign][#][0][width][,|_][.precision][type] for s d b o x X c e E f F g G %.
#pragma once

#include <string>

#include "value.h"

namespace finetune::jinja {

// With `escape_values` (the format string is markupsafe Markup), each %s / %r value and each
// {} field is HTML-escaped unless it is Markup itself.
std::string python_percent_format(const std::string& format, const Value& args, bool escape_values = false);
std::string python_str_format(const std::string& format, const Arguments& args, bool escape_values = false);

}  // namespace finetune::jinja
