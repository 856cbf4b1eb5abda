// Splits a template into tokens exactly as jinja2's lexer does with transformers' settings
// (trim_blocks, lstrip_blocks, keep_trailing_newline=False):
//   - line endings \r\n and \r become \n, and one trailing newline of the source is dropped;
//   - text, {{ expressions }}, {% statements %}, {# comments #} and {% raw %} blocks, with "-"
//     (strip all whitespace on that side) and "+" (keep it: no lstrip / trim) modifiers;
//   - trim_blocks drops the first newline after a block or comment tag; lstrip_blocks drops the
//     spaces and tabs before a block or comment tag that starts its line;
//   - inside tags: names, strings (Python escapes), integers (with _, 0b/0o/0x), floats,
//     operators; a tag's end is only recognised where its brackets are balanced.
// Comments and raw markers produce no tokens; raw content is text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace finetune::jinja {

enum class TokenType { Text, VariableBegin, VariableEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Operator, End };

struct Token {
  TokenType type;
  std::string text;  // Text: the text; Name: the name; String: the unescaped value; Operator: e.g. "==", "("
  size_t line;
  int64_t integer = 0;
  double number = 0.0;
};

// Throws TemplateError naming `template_name` and the line.
std::vector<Token> tokenize(const std::string& source, const std::string& template_name);

}  // namespace finetune::jinja
