// Parsing JSON that comes from outside the process (config.json, tokenizer files, datasets, option
// files, adapter configs, checkpoint indexes, safetensors headers): every JSON input goes through
// parse_json / read_json_file, which refuse nesting deeper than kMaxJsonDepth while parsing.
//
// Note [JSON nesting limit]
// nlohmann's parser is iterative, but its copy, dump() and comparison recurse once per level, as
// do our own walks of nested values: 120 KB of '[' in a --config value (dumped into an error
// message) or 1 MB under a config.json key (copied into ModelConfig::raw) overflowed the stack.
// parse_json builds the DOM itself from nlohmann's SAX events and stops at the first container
// that would open at depth kMaxJsonDepth + 1, before it exists, so no value handed out is deeper
// than the limit and every later recursion over it is bounded.
// 128 is serde_json's default recursion limit, which is what Hugging Face's Rust libraries
// (tokenizers, safetensors) read tokenizer.json and safetensors headers with, so no file they
// accept is refused here. Real files are far shallower: config.json, tokenizer_config.json and
// adapter_config.json nest 3-4 levels, tokenizer.json about 8 (nested pre-tokenizer and
// post-processor sequences), chat dataset rows about 5 (tool-call schemas a few more).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "finetune/util/errors.h"

namespace finetune {

// Arrays and objects nested inside one another; `[]` and `{"a": 1}` have depth 1.
constexpr int kMaxJsonDepth = 128;

// Text that is not JSON, or nests deeper than kMaxJsonDepth. what() reads
// "<source>: invalid JSON at line L, column C: <reason>".
class JsonSyntaxError : public Error {
 public:
  JsonSyntaxError(const std::string& source, size_t line, size_t column, const std::string& reason);

  size_t line() const { return line_; }      // 1-based, of the offending byte
  size_t column() const { return column_; }  // 1-based, in bytes
  const std::string& reason() const { return reason_; }

 private:
  size_t line_;
  size_t column_;
  std::string reason_;
};

// Called for every object key while parsing; depth 1 is the top-level object's keys.
using JsonKeyObserver = std::function<void(int depth, const std::string& key)>;

// Parses `text`; `source` (a file name, or a description such as "safetensors file 'x' header")
// starts every error message.
nlohmann::json parse_json(std::string_view text, const std::string& source, const JsonKeyObserver& on_key = nullptr);

// The same, keeping objects' keys in file order (as Python's json does): for values that are
// shown again, such as dataset rows a chat template renders with tojson.
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& source);

// Reads the whole file and parses it; a file that cannot be opened throws Error
// "<path>: cannot open" followed by " (<open_hint>)" when a hint is given.
nlohmann::json read_json_file(const std::string& path, const std::string& open_hint = "");

// A value for an error message: its dump(), cut to about `max_chars` characters (a hostile file
// may hold huge arrays or strings).
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 120);
std::string json_excerpt(const nlohmann::ordered_json& value, size_t max_chars = 120);

}  // namespace finetune
