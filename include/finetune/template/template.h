// Hugging Face chat templates: a Jinja engine that renders the `chat_template` of a
// tokenizer_config.json exactly as transformers does (jinja2's ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks, the loopcontrols extension, transformers' AssistantTracker
// {% generation %} tag, its tojson filter and the raise_exception / strftime_now globals).
//
// Supported: text, {{ }}, {% %}, {# #}, raw, whitespace control (- and +); statements for (with
// else, a filter condition, unpacking, break/continue, loop.*), if/elif/else, set (names, tuples,
// namespace attributes, block set), macro (defaults, keyword arguments, caller, varargs/kwargs),
// call, filter, with, print, generation; Python-like expressions, and jinja2's filters, tests and
// globals (range, dict, namespace, cycler, joiner) as a chat template uses them. Values behave like
// the Python objects jinja2 sees: they print with Python's str()/repr(), dicts keep insertion order,
// truthiness and comparisons are Python's, undefined names are jinja2's default Undefined.
// Not supported (a TemplateError where jinja2 would do something): template inheritance and
// inclusion (extends, include, import, from; a {% block %} renders in place), autoescape blocks,
// recursive loops, the filters groupby, filesizeformat, pprint, random, striptags, urlencode, urlize,
// wordwrap and xmlattr, lipsum(), a few rare str methods (encode, casefold, expandtabs, format_map,
// isidentifier, isprintable, translate), \N{...} and lone-surrogate string escapes, integers beyond
// 64 bits and complex numbers. Known differences in what prints: objects jinja2 prints with a memory
// address (functions, generators) print without one, range() is a list, and strftime_now's %f is
// always 000000.
//
// Templates come from downloaded files, so parsing and rendering are bounded (TemplateOptions):
// nesting depth, macro recursion, output size and total loop iterations; exceeding a bound is a
// TemplateError, never a crash or a hang.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "finetune/util/errors.h"

namespace finetune::jinja {

// Every failure of a template, syntax or runtime, raise_exception() included.
// what(): "<template name> line <line>: <message>"; raise_exception's message is passed verbatim.
class TemplateError : public Error {
 public:
  TemplateError(const std::string& template_name, size_t line, const std::string& message);

  size_t line() const { return line_; }
  const std::string& message() const { return message_; }

 private:
  size_t line_;
  std::string message_;
};

struct TemplateOptions {
  int max_nesting_depth = 64;           // parsing: statements and expressions nested in one another
  int max_macro_depth = 128;            // rendering: macro and caller() calls nested in one another
  size_t max_output_bytes = 64 << 20;   // rendering: the output, and any string or list built on the way
  uint64_t max_iterations = 5'000'000;  // rendering: loop iterations plus items walked by filters
  // strftime_now()'s clock (local time); empty: the system clock.
  std::function<std::tm()> local_time;
};

struct TemplateProgram;  // the parsed template

class Template {
 public:
  // Parses; throws TemplateError.
  explicit Template(std::string source, std::string name = "chat template", TemplateOptions options = {});

  struct Output {
    std::string text;
    // [begin, end) byte offsets into text of each {% generation %} block's output, in render order,
    // as transformers' AssistantTracker reports them (it counts characters; these are the same
    // positions in bytes).
    std::vector<std::pair<size_t, size_t>> generation_spans;
  };

  // The context's keys become the template's global variables (messages, add_generation_prompt,
  // bos_token, tools, ...). Throws TemplateError.
  Output render(const nlohmann::ordered_json& context) const;

  // Whether the template contains a {% generation %} block.
  bool has_generation_markers() const;

  const std::string& name() const;

 private:
  std::shared_ptr<const TemplateProgram> program_;
  TemplateOptions options_;
};

}  // namespace finetune::jinja
